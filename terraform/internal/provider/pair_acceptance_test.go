package provider

// Acceptance tests of holdfast_pair and holdfast_pair_status: one real pair (two TP1
// appliances as libvirt domains under TCG, the supervisor detached) brought up, read,
// changed in place, imported, found down (the plan would bring it up again) and destroyed;
// and failed applies that leave nothing behind, in libvirt or elsewhere.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func pairBlock(name, stateDir, image, extra string) string {
	return fmt.Sprintf(`
resource "holdfast_pair" "pair" {
  name        = %q
  state_dir   = %q
  image_dir   = %q
  libvirt_uri = "qemu:///system"
  accel       = "tcg"
  # The default size: the TP1 appliance's first checkpoint needs a store of about
  # 1600 MiB, and its kernel refuses to boot on a smaller one.
  store_mib = 2048
%s
}
`, name, stateDir, image, extra)
}

// holdfastCLI runs the CLI of this source tree with the test's state directory.
func holdfastCLI(t *testing.T, stateDir string, arguments ...string) (string, error) {
	command := exec.Command(filepath.Join(repoRoot(t), "holdfast"), arguments...)
	command.Env = append(os.Environ(), "HOLDFAST_STATE_DIR="+stateDir)
	output, err := command.CombinedOutput()
	return string(output), err
}

// cliStatus is `holdfast pair status NAME --json`, decoded.
func cliStatus(t *testing.T, stateDir, name string) (map[string]any, error) {
	output, err := holdfastCLI(t, stateDir, "pair", "status", name, "--json")
	if err != nil {
		return nil, fmt.Errorf("holdfast pair status: %v: %s", err, output)
	}
	var status map[string]any
	return status, json.Unmarshal([]byte(output), &status)
}

// vmPids are the pair's QEMU processes as its supervisor reports them.
func vmPids(t *testing.T, stateDir, name string) ([2]float64, error) {
	status, err := cliStatus(t, stateDir, name)
	if err != nil {
		return [2]float64{}, err
	}
	var pids [2]float64
	for index, node := range status["nodes"].([]any) {
		pid, _ := node.(map[string]any)["pid"].(float64)
		if pid == 0 {
			return pids, fmt.Errorf("node %d runs no QEMU: %v", index+1, node)
		}
		pids[index] = pid
	}
	return pids, nil
}

// processesUsing lists the processes whose command line or environment names dir: what a
// pair in that state directory runs (the supervisor, its QEMUs).
func processesUsing(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, entry := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil || entry.Name() == "self" {
			continue
		}
		// The supervisor has the directory in its environment, its QEMUs on their command line.
		environment, _ := os.ReadFile(filepath.Join("/proc", entry.Name(), "environ"))
		text := strings.ReplaceAll(string(cmdline), "\x00", " ")
		mentions := strings.Contains(text, dir) || strings.Contains(string(environment), "HOLDFAST_STATE_DIR="+dir+"\x00")
		if mentions && !strings.Contains(text, "pair status") {
			found = append(found, entry.Name()+": "+text)
		}
	}
	return found
}

// pairDomains lists the libvirt domains (running or only defined) of pair name in stateDir:
// `holdfast-pair-NAME-N-HASH`, HASH the FNV-1a of the pair's directory, as the CLI names
// them. Only this run's: a killed run of the same test left its own (under another
// temporary directory) on the shared libvirtd.
func pairDomains(stateDir, name string) ([]string, error) {
	l, err := testLibvirt()
	if err != nil {
		return nil, err
	}
	defer l.Disconnect()
	domains, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, err
	}
	directory, err := filepath.Abs(filepath.Join(stateDir, "pairs", name))
	if err != nil {
		return nil, err
	}
	hash := fnv.New32a()
	hash.Write([]byte(directory))
	pattern := regexp.MustCompile(fmt.Sprintf(`^holdfast-pair-%s-[12]-%08x$`, regexp.QuoteMeta(name), hash.Sum32()))
	var found []string
	for _, domain := range domains {
		if pattern.MatchString(domain.Name) {
			found = append(found, domain.Name)
		}
	}
	return found, nil
}

// pairDomainsRunning checks that libvirt runs both of the pair's domains, as its state names them.
func pairDomainsRunning(state *terraform.State) error {
	attributes := state.RootModule().Resources["holdfast_pair.pair"].Primary.Attributes
	l, err := testLibvirt()
	if err != nil {
		return err
	}
	defer l.Disconnect()
	for _, node := range []string{"0", "1"} {
		name := attributes["nodes."+node+".domain"]
		domain, err := l.DomainLookupByName(name)
		if err != nil {
			return fmt.Errorf("node %s's domain %q: %w", node, name, err)
		}
		if active, err := isActive(l, domain); err != nil || !active {
			return fmt.Errorf("node %s's domain %s does not run (%v)", node, name, err)
		}
	}
	return nil
}

// pairGone checks that nothing of the pair is left: no supervisor answering, no process of
// its state directory, no libvirt domain, no directory.
func pairGone(t *testing.T, stateDir, name string) error {
	if output, err := holdfastCLI(t, stateDir, "pair", "status", name); err == nil || !strings.Contains(output, "is not up") {
		return fmt.Errorf("pair %s still answers: %s", name, output)
	}
	if processes := processesUsing(stateDir); len(processes) > 0 {
		return fmt.Errorf("processes of pair %s are still running:\n%s", name, strings.Join(processes, "\n"))
	}
	if domains, err := pairDomains(stateDir, name); err != nil || len(domains) > 0 {
		return fmt.Errorf("libvirt still has pair %s's domains %v (%v)", name, domains, err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "pairs", name)); !os.IsNotExist(err) {
		return fmt.Errorf("pair %s's directory is still there (%v)", name, err)
	}
	return nil
}

// endpointAccepts checks that the pair's endpoint takes a TCP connection.
func endpointAccepts(state *terraform.State) error {
	endpoint := state.RootModule().Resources["holdfast_pair.pair"].Primary.Attributes["endpoint"]
	connection, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	if err != nil {
		return fmt.Errorf("the endpoint %s: %w", endpoint, err)
	}
	return connection.Close()
}

// TestAccPairLifecycle: one pair, up once, found down and planned up again (about half a
// minute here).
func TestAccPairLifecycle(t *testing.T) {
	preCheck(t)
	image := imageDir(t, "tp1-image", "services/tp1-manifest.toml")
	stateDir := reachableTempDir(t)
	name := "tfacc-pair"
	config := func(extra string) string { return providerBlock(t) + pairBlock(name, stateDir, image, extra) }
	endpoint := regexp.MustCompile(`^127\.0\.0\.1:[0-9]+$`)
	var pidsBefore [2]float64
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		CheckDestroy:             func(*terraform.State) error { return pairGone(t, stateDir, name) },
		Steps: []resource.TestStep{
			{
				// Create returns once the primary serves and the standby holds a whole copy.
				Config: config(`  mode = "sync-durable"`),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("holdfast_pair.pair", "id", name),
					resource.TestMatchResourceAttr("holdfast_pair.pair", "endpoint", endpoint),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "primary", name+"-1"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "standby", name+"-2"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "nodes.#", "2"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "nodes.0.role", "primary"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "nodes.1.role", "standby"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "mode", "sync-durable"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "store_mib", "2048"),
					resource.TestCheckResourceAttr("holdfast_pair.pair", "libvirt_uri", "qemu:///system"),
					resource.TestMatchResourceAttr("holdfast_pair.pair", "nodes.0.domain", regexp.MustCompile(`^holdfast-pair-`+name+`-1-[0-9a-f]{8}$`)),
					resource.TestMatchResourceAttr("holdfast_pair.pair", "nodes.1.domain", regexp.MustCompile(`^holdfast-pair-`+name+`-2-[0-9a-f]{8}$`)),
					pairDomainsRunning,
					endpointAccepts,
					func(*terraform.State) error {
						status, err := cliStatus(t, stateDir, name)
						if err != nil {
							return err
						}
						if standby := status["nodes"].([]any)[1].(map[string]any)["state"]; standby != "consistent" {
							return fmt.Errorf("create returned with the standby %v, not consistent", standby)
						}
						pidsBefore, err = vmPids(t, stateDir, name)
						return err
					},
				),
			},
			{
				// The mode changes in place: the same QEMUs, the supervisor says async.
				Config: config(`  mode = "async"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_pair.pair", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("holdfast_pair.pair", "mode", "async"),
					func(*terraform.State) error {
						status, err := cliStatus(t, stateDir, name)
						if err != nil {
							return err
						}
						if status["mode"] != "async" {
							return fmt.Errorf("the supervisor says mode %v", status["mode"])
						}
						pids, err := vmPids(t, stateDir, name)
						if err != nil {
							return err
						}
						if pids != pidsBefore {
							return fmt.Errorf("the VMs were restarted for a new mode (QEMU pids %v, then %v)", pidsBefore, pids)
						}
						return nil
					},
				),
			},
			{
				// Bigger stores and more memory make a new pair, and the plan says so.
				Config:             config("  mode = \"async\"\n  memory_mib = 640\n"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_pair.pair", plancheck.ResourceActionReplace),
				}},
			},
			{
				Config:             strings.Replace(config(`  mode = "async"`), "store_mib = 2048", "store_mib = 1024", 1),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_pair.pair", plancheck.ResourceActionReplace),
				}},
			},
			{
				// Import by the pair's directory (its state directory is not the default).
				ResourceName:      "holdfast_pair.pair",
				ImportState:       true,
				ImportStateId:     filepath.Join(stateDir, "pairs", name),
				ImportStateVerify: true,
				// Settings only `pair up` is given; the supervisor does not report them.
				ImportStateVerifyIgnore: []string{"image_dir", "accel"},
			},
			{
				// The data source: what the supervisor reports now.
				Config: config(`  mode = "async"`) + `
data "holdfast_pair_status" "now" {
  name      = holdfast_pair.pair.name
  state_dir = holdfast_pair.pair.state_dir
}
`,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("data.holdfast_pair_status.now", "mode", "async"),
					resource.TestCheckResourceAttr("data.holdfast_pair_status.now", "primary", name+"-1"),
					resource.TestCheckResourceAttr("data.holdfast_pair_status.now", "term", "0"),
					resource.TestCheckResourceAttr("data.holdfast_pair_status.now", "promotions", "0"),
					resource.TestCheckResourceAttr("data.holdfast_pair_status.now", "nodes.0.state", "serving"),
					resource.TestCheckResourceAttrPair("data.holdfast_pair_status.now", "endpoint", "holdfast_pair.pair", "endpoint"),
				),
			},
			{
				// Taken down behind Terraform's back: the plan says it must be brought up
				// again (up false -> true). Only planned: the bring-up is `pair up` on the
				// stores the pair left, which the CLI's tests/pair.rs shows after both VMs
				// crashed; applying it here cost CI a pair boot (issue of CI time). Destroy
				// then takes down a pair that is not up.
				PreConfig: func() {
					if output, err := holdfastCLI(t, stateDir, "pair", "down", name); err != nil {
						t.Fatalf("holdfast pair down: %v: %s", err, output)
					}
					deadline := time.Now().Add(60 * time.Second)
					for len(processesUsing(stateDir)) > 0 && time.Now().Before(deadline) {
						time.Sleep(200 * time.Millisecond)
					}
				},
				Config:             config(`  mode = "async"`),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				// After the refresh, which reads the pair down.
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_pair.pair", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("holdfast_pair.pair", tfjsonpath.New("up"), knownvalue.Bool(true)),
				}},
			},
		},
	})
}

// TestAccPairFailedApplyLeavesNothing: a pair that cannot start (no image) and one that does
// not serve in time (ready_timeout_seconds = 1) fail the apply and leave nothing: no
// supervisor, no QEMU, no libvirt domain, no directory, no state (upstream #921); the next
// plan creates the pair afresh.
func TestAccPairFailedApplyLeavesNothing(t *testing.T) {
	preCheck(t)
	image := imageDir(t, "tp1-image", "services/tp1-manifest.toml")
	stateDir := reachableTempDir(t)
	empty := t.TempDir()
	name := "tfacc-pairfail"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		Steps: []resource.TestStep{
			{
				Config:      providerBlock(t) + pairBlock(name, stateDir, empty, ""),
				ExpectError: regexp.MustCompile(`Cannot create the Holdfast pair ` + name),
			},
			{
				PreConfig: func() {
					if err := pairGone(t, stateDir, name); err != nil {
						t.Fatal(err)
					}
				},
				Config:      providerBlock(t) + pairBlock(name, stateDir, image, "  ready_timeout_seconds = 1\n"),
				ExpectError: regexp.MustCompile(`not serving within 1 s`),
			},
			{
				Config:             providerBlock(t) + pairBlock(name, stateDir, image, ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_pair.pair", plancheck.ResourceActionCreate),
					pairGoneCheck{t, stateDir, name},
				}},
			},
		},
	})
}

type pairGoneCheck struct {
	t              *testing.T
	stateDir, name string
}

func (c pairGoneCheck) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	resp.Error = pairGone(c.t, c.stateDir, c.name)
}
