package provider

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminLike answers lines the way services/admin does, starting with a line fragment it
// was restored with (a checkpoint taken while a request was arriving), and with a reply
// left over from a client that gave up.
func adminLike(t *testing.T, fragment, leftover string) string {
	socket := filepath.Join(t.TempDir(), "control.sock")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	go func() {
		connection, err := listener.Accept()
		if err != nil {
			return
		}
		defer connection.Close()
		connection.Write([]byte(leftover))
		reader := bufio.NewReader(connection)
		pending := fragment
		for {
			line, err := reader.ReadString('\n')
			if err != nil {
				return
			}
			request := pending + strings.TrimSuffix(line, "\n")
			pending = ""
			switch request {
			case "checkpoint status":
				connection.Write([]byte("ok generation 7 interval-ms 5000 log-fill-permille 3 degraded 0 failures-since-commit 0\n"))
			case "checkpoint now":
				connection.Write([]byte("ok\n"))
			default:
				connection.Write([]byte("error unknown request (checkpoint status | checkpoint now)\n"))
			}
		}
	}()
	return socket
}

func TestARestoredLineFragmentDoesNotGarbleTheRequest(t *testing.T) {
	socket := adminLike(t, "checkpoint st", "")
	generation, err := checkpointGeneration(socket, time.Now().Add(5*time.Second))
	if err != nil || generation != 7 {
		t.Fatalf("got generation %d, %v; want 7", generation, err)
	}
}

func TestALeftoverReplyIsNotTakenForOurs(t *testing.T) {
	socket := adminLike(t, "", "ok\n")
	generation, err := checkpointGeneration(socket, time.Now().Add(5*time.Second))
	if err != nil || generation != 7 {
		t.Fatalf("got generation %d, %v; want 7", generation, err)
	}
}
