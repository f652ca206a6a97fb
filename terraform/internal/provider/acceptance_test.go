package provider

// Acceptance tests (TF_ACC=1): the provider in-process (ProtoV6ProviderFactories, no
// registry), the terraform binary on the machine, a real libvirtd (started here when none
// runs) and real Holdfast guests under TCG. Each upstream complaint the provider answers
// has its test: see README.md's table.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

const (
	testPool = "holdfast-tfacc"
	// Where the test pool keeps its volumes: under /var/lib, which QEMU's user can reach.
	testPoolDir = "/var/lib/holdfast/tfacc-pool"
)

var testProviders = map[string]func() (tfprotov6.ProviderServer, error){
	"holdfast": providerserver.NewProtocol6WithError(New("test")()),
}

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// imageDir is an image `holdfast image build` wrote; ci/test.sh builds both before the
// tests.
func imageDir(t *testing.T, name, manifest string) string {
	dir := filepath.Join(repoRoot(t), "build", name)
	if _, err := os.Stat(filepath.Join(dir, kernelFileName)); err != nil {
		t.Fatalf("%v: build it first: ./holdfast image build --manifest %s --out build/%s", err, manifest, name)
	}
	return dir
}

var setUpOnce sync.Once
var setUpError error

// preCheck starts virtlogd and libvirtd when none runs (there is no systemd here) and
// makes the test pool, once for every test.
func preCheck(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance tests run with TF_ACC=1 (they start libvirtd and boot guests)")
	}
	setUpOnce.Do(func() { setUpError = setUpLibvirt() })
	if setUpError != nil {
		t.Fatal(setUpError)
	}
}

func testLibvirt() (*libvirt.Libvirt, error) {
	uri, _ := url.Parse(defaultURI)
	return libvirt.ConnectToURI(uri)
}

func setUpLibvirt() error {
	if _, err := testLibvirt(); err != nil {
		// virtlogd may run without libvirtd (it outlives it): start only what does not answer.
		for _, daemon := range [][2]string{{"virtlogd", "/run/libvirt/virtlogd-sock"}, {"libvirtd", "/run/libvirt/libvirt-sock"}} {
			if connection, err := net.Dial("unix", daemon[1]); err == nil {
				connection.Close()
				continue
			}
			if output, err := exec.Command(daemon[0], "-d").CombinedOutput(); err != nil {
				return fmt.Errorf("starting %s: %v: %s", daemon[0], err, output)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := testLibvirt()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("libvirtd started but does not answer: %w", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	l, err := testLibvirt()
	if err != nil {
		return err
	}
	defer l.Disconnect()
	if err := removeLeftovers(l); err != nil {
		return err
	}
	if _, err := l.StoragePoolLookupByName(testPool); err == nil {
		return nil
	}
	if err := os.MkdirAll(testPoolDir, 0o755); err != nil {
		return err
	}
	pool, err := l.StoragePoolDefineXML(fmt.Sprintf(
		`<pool type="dir"><name>%s</name><target><path>%s</path></target></pool>`, testPool, testPoolDir), 0)
	if err != nil {
		return fmt.Errorf("defining the test pool: %w", err)
	}
	if err := l.StoragePoolCreate(pool, 0); err != nil {
		return fmt.Errorf("starting the test pool: %w", err)
	}
	return nil
}

// reachableTempDir is a temporary directory QEMU's user can enter (t.TempDir's are 0700,
// and so is the directory above them).
func reachableTempDir(t *testing.T) string {
	dir := t.TempDir()
	for _, each := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(each, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// removeLeftovers removes the domains and volumes (all named tfacc-...) that an earlier run
// killed half-way left behind, so that this run does not trip over them.
func removeLeftovers(l *libvirt.Libvirt) error {
	domains, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return err
	}
	for _, domain := range domains {
		if strings.HasPrefix(domain.Name, "tfacc-") {
			_ = l.DomainDestroy(domain)
			if err := l.DomainUndefine(domain); err != nil {
				return fmt.Errorf("removing leftover domain %s: %w", domain.Name, err)
			}
		}
	}
	pool, err := l.StoragePoolLookupByName(testPool)
	if err != nil {
		return nil
	}
	volumes, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		return err
	}
	for _, volume := range volumes {
		if strings.HasPrefix(volume.Name, "tfacc-") {
			if err := l.StorageVolDelete(volume, libvirt.StorageVolDeleteNormal); err != nil {
				return fmt.Errorf("removing leftover volume %s: %w", volume.Name, err)
			}
		}
	}
	return nil
}

func freePort(t *testing.T) int {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

func providerBlock(t *testing.T) string {
	return fmt.Sprintf("provider \"holdfast\" {\n  holdfast_command = %q\n}\n", repoRoot(t))
}

func storeBlock(name string, sizeMiB int) string {
	return fmt.Sprintf(`
resource "holdfast_store" "store" {
  name     = %q
  pool     = %q
  size_mib = %d
}
`, name, testPool, sizeMiB)
}

// applianceBlock is an appliance on the store above with extra attributes (HCL lines).
func applianceBlock(name, image, stateDir, extra string) string {
	return fmt.Sprintf(`
resource "holdfast_appliance" "vm" {
  name      = %q
  disks     = holdfast_store.store.volume_paths
  image_dir = %q
  state_dir = %q
%s
}
`, name, image, stateDir, extra)
}

func domainAbsent(name string) error {
	l, err := testLibvirt()
	if err != nil {
		return err
	}
	defer l.Disconnect()
	if _, err := l.DomainLookupByName(name); err == nil {
		return fmt.Errorf("libvirt still has a domain %q", name)
	} else if !libvirt.IsNotFound(err) {
		return err
	}
	return nil
}

// domainRunning checks the domain runs with memoryMiB and records its libvirt id (which a
// restart changes) in *id.
func domainRunning(name string, memoryMiB uint64, id *int32) resource.TestCheckFunc {
	return func(*terraform.State) error {
		l, err := testLibvirt()
		if err != nil {
			return err
		}
		defer l.Disconnect()
		domain, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		state, maxMemoryKiB, _, _, _, err := l.DomainGetInfo(domain)
		if err != nil {
			return err
		}
		if libvirt.DomainState(state) != libvirt.DomainRunning {
			return fmt.Errorf("domain %s is in state %d, not running", name, state)
		}
		if maxMemoryKiB != memoryMiB*1024 {
			return fmt.Errorf("domain %s has %d KiB, want %d MiB", name, maxMemoryKiB, memoryMiB)
		}
		*id = domain.ID
		return nil
	}
}

func consoleSays(logPath, text string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		log, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(log), text) {
			return fmt.Errorf("the console log %s does not say %q:\n%s", logPath, text, log)
		}
		return nil
	}
}

// noAddressKnown checks that libvirt knows no IP address for the domain: there was none to
// wait for, so readiness can only have come from the console.
func noAddressKnown(name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		l, err := testLibvirt()
		if err != nil {
			return err
		}
		defer l.Disconnect()
		domain, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		interfaces, err := l.DomainInterfaceAddresses(domain, uint32(libvirt.DomainInterfaceAddressesSrcLease), 0)
		if err != nil {
			return err
		}
		if len(interfaces) != 0 {
			return fmt.Errorf("libvirt knows addresses for %s: %+v", name, interfaces)
		}
		return nil
	}
}

// storeGeneration is the committed checkpoint generation `holdfast store inspect` reads from the
// store's disks.
func storeGeneration(t *testing.T, disks ...string) (uint64, error) {
	arguments := append([]string{"store", "inspect"}, disks...)
	output, err := exec.Command(filepath.Join(repoRoot(t), "holdfast"), arguments...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("holdfast store inspect: %v\n%s", err, output)
	}
	match := regexp.MustCompile(`(?m)^checkpoint\s+generation (\d+) committed`).FindSubmatch(output)
	if match == nil {
		return 0, fmt.Errorf("holdfast store inspect says no generation:\n%s", output)
	}
	return strconv.ParseUint(string(match[1]), 10, 64)
}

func volumePaths(state *terraform.State) []string {
	attributes := state.RootModule().Resources["holdfast_store.store"].Primary.Attributes
	count, _ := strconv.Atoi(attributes["volume_paths.#"])
	var paths []string
	for index := 0; index < count; index++ {
		paths = append(paths, attributes[fmt.Sprintf("volume_paths.%d", index)])
	}
	return paths
}

// TestAccApplianceLifecycle: create (readiness from the console, no IP), an update that
// needs no restart, one that restarts, import of both resources, a plan that says which
// changes replace, and destroy as a committed checkpoint before QEMU stops.
func TestAccApplianceLifecycle(t *testing.T) {
	preCheck(t)
	image := imageDir(t, "persist", "services/persist-manifest.toml")
	stateDir := reachableTempDir(t)
	name := "tfacc-life"
	port := freePort(t)
	// Checkpoints only when asked (every ten minutes otherwise): the generation on the disks
	// after destroy then shows that destroy took one.
	common := fmt.Sprintf("  tp1_port = %d\n", port)
	config := func(extra string) string {
		if !strings.Contains(extra, "kernel_append") {
			extra += "  kernel_append = \"holdfast.checkpoint-interval-ms=600000\"\n"
		}
		return providerBlock(t) + storeBlock("tfacc-life", 16) + applianceBlock(name, image, stateDir, common+extra)
	}
	consoleLog := filepath.Join(stateDir, name, "console.log")
	controlSocket := filepath.Join(stateDir, name, "control.sock")
	var firstID, secondID, thirdID, fourthID int32
	var generationBeforeDestroy uint64
	var disks []string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		CheckDestroy: func(*terraform.State) error {
			return domainAbsent(name)
		},
		Steps: []resource.TestStep{
			{
				Config: config(""),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("holdfast_store.store", "id", testPool+"/tfacc-life"),
					resource.TestCheckResourceAttr("holdfast_store.store", "volume_paths.#", "2"),
					resource.TestCheckResourceAttr("holdfast_store.store", "volume_paths.1", testPoolDir+"/tfacc-life-mirror1.img"),
					resource.TestCheckResourceAttr("holdfast_appliance.vm", "console_log", consoleLog),
					resource.TestCheckResourceAttr("holdfast_appliance.vm", "memory_mib", "256"),
					domainRunning(name, 256, &firstID),
					// Create returned once the kernel said it was ready, with no address to
					// wait for: QEMU's user network gives libvirt none.
					consoleSays(consoleLog, "HOLDFAST-READY"),
					consoleSays(consoleLog, "holdfast: store: mirrored on 2 disks"),
					noAddressKnown(name),
				),
			},
			{
				// The provider's own settings: an update in place, no restart.
				Config: config("  shutdown_timeout_seconds = 45\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					domainRunning(name, 256, &secondID),
					func(*terraform.State) error {
						if secondID != firstID {
							return fmt.Errorf("the VM restarted (id %d, then %d) for a change that needs no restart", firstID, secondID)
						}
						return nil
					},
				),
			},
			{
				// Memory: an update in place with a graceful restart; the store stays.
				Config: config("  shutdown_timeout_seconds = 45\n  memory_mib = 320\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					domainRunning(name, 320, &thirdID),
					func(*terraform.State) error {
						if thirdID == secondID {
							return fmt.Errorf("the VM was not restarted (id %d) for a change of memory", thirdID)
						}
						return nil
					},
					consoleSays(consoleLog, "HOLDFAST-READY"),
				),
			},
			{
				// The VM stops behind Terraform's back (a crash, virsh destroy): the plan
				// shows running = false -> true, and apply starts it again.
				PreConfig: func() {
					l, err := testLibvirt()
					if err == nil {
						defer l.Disconnect()
						var domain libvirt.Domain
						if domain, err = l.DomainLookupByName(name); err == nil {
							err = l.DomainDestroy(domain)
						}
					}
					if err != nil {
						t.Fatal(err)
					}
				},
				Config: config("  shutdown_timeout_seconds = 45\n  memory_mib = 320\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("holdfast_appliance.vm", tfjsonpath.New("running"), knownvalue.Bool(true)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					domainRunning(name, 320, &fourthID),
					func(*terraform.State) error {
						if fourthID == thirdID {
							return fmt.Errorf("the VM was not started again (id %d)", fourthID)
						}
						return nil
					},
				),
			},
			{
				ResourceName:      "holdfast_appliance.vm",
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				ResourceName:      "holdfast_store.store",
				ImportState:       true,
				ImportStateId:     testPool + "/tfacc-life",
				ImportStateVerify: true,
			},
			{
				// A bigger store replaces the store and, since its volumes are new, the VM;
				// a new image directory only restarts the VM. The plan says each.
				Config:             strings.Replace(config("  shutdown_timeout_seconds = 45\n  memory_mib = 320\n"), "size_mib = 16", "size_mib = 32", 1),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionReplace),
				}},
			},
			{
				Config:             config("  shutdown_timeout_seconds = 45\n  memory_mib = 320\n  kernel_append = \"holdfast.checkpoint-interval-ms=5000\"\n"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionUpdate),
				}},
			},
			{
				// Destroy the appliance only: it must take a checkpoint and commit it before
				// QEMU stops, so the disks hold a newer generation than the running VM had.
				Config: config("  shutdown_timeout_seconds = 45\n  memory_mib = 320\n"),
				Check: func(state *terraform.State) error {
					disks = volumePaths(state)
					var err error
					generationBeforeDestroy, err = checkpointGeneration(controlSocket, time.Now().Add(30*time.Second))
					return err
				},
			},
			{
				Config: providerBlock(t) + storeBlock("tfacc-life", 16),
				Check: func(*terraform.State) error {
					if err := domainAbsent(name); err != nil {
						return err
					}
					generation, err := storeGeneration(t, disks...)
					if err != nil {
						return err
					}
					if generation <= generationBeforeDestroy {
						return fmt.Errorf("the store's generation is %d after destroy, %d before: destroy took no checkpoint", generation, generationBeforeDestroy)
					}
					return nil
				},
			},
		},
	})
}

// TestAccStoreMissingPool: a pool that does not exist is an error that says how to make
// it (upstream #446), and nothing is created.
func TestAccStoreMissingPool(t *testing.T) {
	preCheck(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		Steps: []resource.TestStep{{
			Config: providerBlock(t) + `
resource "holdfast_store" "store" {
  name     = "tfacc-nopool"
  pool     = "tfacc-no-such-pool"
  size_mib = 8
}
`,
			ExpectError: wrappedText(`libvirt at qemu:///system has no storage pool "tfacc-no-such-pool". Fix: create it, e.g. ` +
				`virsh pool-define-as tfacc-no-such-pool dir --target /var/lib/libvirt/tfacc-no-such-pool && virsh pool-build tfacc-no-such-pool`),
		}},
	})
}

// TestAccAppliancePermissionDenied: an image in a directory QEMU's user cannot enter is an
// error naming the user, the directory and the fix (upstream #1163), before any domain is
// defined.
func TestAccAppliancePermissionDenied(t *testing.T) {
	preCheck(t)
	if qemuUser() == nil {
		t.Skip("QEMU runs as root here: no directory can keep it out")
	}
	image := imageDir(t, "persist", "services/persist-manifest.toml")
	private := filepath.Join(reachableTempDir(t), "private")
	if err := os.MkdirAll(filepath.Join(private, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{kernelFileName, initialImageFileName} {
		content, err := os.ReadFile(filepath.Join(image, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(private, "image", file), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Both directories are named, outermost first, so that one fix clears them.
	blocking := []string{private, private + "/image"}
	var described []string
	for _, directory := range blocking {
		described = append(described, directory+" (mode 0700, owner root)")
	}
	name := "tfacc-perm"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		CheckDestroy:             func(*terraform.State) error { return domainAbsent(name) },
		Steps: []resource.TestStep{{
			Config: providerBlock(t) + storeBlock("tfacc-perm", 8) +
				applianceBlock(name, filepath.Join(private, "image"), reachableTempDir(t), ""),
			ExpectError: wrappedText(fmt.Sprintf(`QEMU runs as user %q here and cannot reach the kernel %s/image/%s: `+
				`%s do not let it through. Fix: chmod o+x %s,`, qemuUser().Username, private, kernelFileName,
				strings.Join(described, ", "), strings.Join(blocking, " "))),
		}},
	})
}

// TestAccApplianceFailedApplyLeavesNothing: when the appliance never says it is ready, the
// apply fails with its console's tail and leaves no domain, in libvirt or in the state
// (upstream #921): the next plan creates it afresh.
func TestAccApplianceFailedApplyLeavesNothing(t *testing.T) {
	preCheck(t)
	image := imageDir(t, "persist", "services/persist-manifest.toml")
	stateDir := reachableTempDir(t)
	name := "tfacc-fail"
	base := providerBlock(t) + storeBlock("tfacc-fail", 8)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		CheckDestroy:             func(*terraform.State) error { return domainAbsent(name) },
		Steps: []resource.TestStep{
			{
				Config: base + applianceBlock(name, image, stateDir, "  ready_line = \"A LINE NO HOLDFAST PRINTS\"\n  ready_timeout_seconds = 3\n"),
				ExpectError: wrappedText(`the console did not say "A LINE NO HOLDFAST PRINTS" within 3 s ` +
					`(ready_timeout_seconds); the end of its console log (` + filepath.Join(stateDir, name, "console.log") + `):`),
			},
			{
				Config:             base + applianceBlock(name, image, stateDir, ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionNoop),
					domainAbsentCheck{name},
				}},
			},
		},
	})
}

// wrappedText matches text exactly but for where Terraform wrapped its lines.
func wrappedText(text string) *regexp.Regexp {
	words := strings.Fields(text)
	for index, word := range words {
		words[index] = regexp.QuoteMeta(word)
	}
	return regexp.MustCompile(strings.Join(words, `\s+`))
}

type domainAbsentCheck struct{ name string }

func (c domainAbsentCheck) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	resp.Error = domainAbsent(c.name)
}

// TestAccApplianceBoundedShutdown: an appliance whose admin service never answers (the
// self-test system has none) is still destroyed within its shutdown_timeout_seconds and
// libvirt's SIGTERM wait, not hung (upstream #356/#1060).
func TestAccApplianceBoundedShutdown(t *testing.T) {
	preCheck(t)
	image := imageDir(t, "image", "services/manifest.toml")
	stateDir := reachableTempDir(t)
	name := "tfacc-bound"
	base := providerBlock(t) + storeBlock("tfacc-bound", 8)
	var destroyStarted time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		Steps: []resource.TestStep{
			{
				Config: base + applianceBlock(name, image, stateDir,
					"  kernel_append = \"holdfast.after=stay\"\n  shutdown_timeout_seconds = 3\n"),
				Check: consoleSays(filepath.Join(stateDir, name, "console.log"), "HOLDFAST-READY"),
			},
			{
				Config: base,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_appliance.vm", plancheck.ResourceActionDestroy),
					startClock{&destroyStarted},
				}},
				Check: func(*terraform.State) error {
					elapsed := time.Since(destroyStarted)
					// 3 s for the checkpoint that never comes, up to libvirt's SIGTERM wait
					// (10 s) if QEMU ignored it, and slack for a loaded host.
					if elapsed > 25*time.Second {
						return fmt.Errorf("destroy took %s with shutdown_timeout_seconds = 3", elapsed)
					}
					return domainAbsent(name)
				},
			},
		},
	})
}

type startClock struct{ started *time.Time }

func (c startClock) CheckPlan(context.Context, plancheck.CheckPlanRequest, *plancheck.CheckPlanResponse) {
	*c.started = time.Now()
}

// TestAccStoreLostMirrorIsNotReplaced: a mirror volume deleted outside Terraform does not
// turn into a plan that replaces the store (which would destroy the mirror holding the
// data); the plan stays empty and a warning says how to give Holdfast a blank volume to
// resilver.
func TestAccStoreLostMirrorIsNotReplaced(t *testing.T) {
	preCheck(t)
	config := providerBlock(t) + storeBlock("tfacc-lost", 8)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		CheckDestroy: func(*terraform.State) error {
			for _, mirror := range []int{0, 1} {
				if _, err := os.Stat(filepath.Join(testPoolDir, volumeName("tfacc-lost", mirror))); !os.IsNotExist(err) {
					return fmt.Errorf("volume %d of tfacc-lost is still there (%v)", mirror, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: func() {
					l, err := testLibvirt()
					if err == nil {
						defer l.Disconnect()
						var pool libvirt.StoragePool
						var volume libvirt.StorageVol
						if pool, err = l.StoragePoolLookupByName(testPool); err == nil {
							if volume, err = l.StorageVolLookupByName(pool, volumeName("tfacc-lost", 1)); err == nil {
								err = l.StorageVolDelete(volume, libvirt.StorageVolDeleteNormal)
							}
						}
					}
					if err != nil {
						t.Fatal(err)
					}
				},
				Config:   config,
				PlanOnly: true,
			},
		},
	})
}

// TestAccStoreInactivePool: a pool that exists but is stopped is an error naming
// `virsh pool-start`, not a failure deep inside volume creation.
func TestAccStoreInactivePool(t *testing.T) {
	preCheck(t)
	const pool = "tfacc-inactive-pool"
	l, err := testLibvirt()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	if old, err := l.StoragePoolLookupByName(pool); err == nil {
		_ = l.StoragePoolUndefine(old)
	}
	defined, err := l.StoragePoolDefineXML(fmt.Sprintf(`<pool type="dir"><name>%s</name><target><path>%s</path></target></pool>`,
		pool, filepath.Join(reachableTempDir(t), "pool")), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.StoragePoolUndefine(defined) })
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		Steps: []resource.TestStep{{
			Config: providerBlock(t) + fmt.Sprintf(`
resource "holdfast_store" "store" {
  name     = "tfacc-inactive"
  pool     = %q
  size_mib = 8
}
`, pool),
			ExpectError: wrappedText(fmt.Sprintf(`storage pool %q exists but is not active. Fix: virsh pool-start %s`, pool, pool)),
		}},
	})
}

// TestAccStoreFailedFormatLeavesNoVolume: when `holdfast store format` cannot run, the
// volumes made for it are deleted and the error names the setting to fix; the next plan
// creates the store afresh (upstream #921, for stores).
func TestAccStoreFailedFormatLeavesNoVolume(t *testing.T) {
	preCheck(t)
	missing := filepath.Join(t.TempDir(), "no-holdfast-here")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testProviders,
		Steps: []resource.TestStep{
			{
				Config:      fmt.Sprintf("provider \"holdfast\" {\n  holdfast_command = %q\n}\n", missing) + storeBlock("tfacc-noformat", 8),
				ExpectError: wrappedText(`Fix: set the provider's holdfast_command`),
			},
			{
				Config:             providerBlock(t) + storeBlock("tfacc-noformat", 8),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPreRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("holdfast_store.store", plancheck.ResourceActionCreate),
					volumesAbsentCheck{"tfacc-noformat"},
				}},
			},
		},
	})
}

type volumesAbsentCheck struct{ store string }

func (c volumesAbsentCheck) CheckPlan(_ context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, mirror := range []int{0, 1} {
		if _, err := os.Stat(filepath.Join(testPoolDir, volumeName(c.store, mirror))); !os.IsNotExist(err) {
			resp.Error = fmt.Errorf("volume %d of store %s, whose creation failed, is still there (%v)", mirror, c.store, err)
			return
		}
	}
}
