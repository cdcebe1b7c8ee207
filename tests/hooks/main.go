// kubevirt-hook-manager: KubeVirt v1.9.0's own hook manager (kubevirt.io/kubevirt/pkg/hooks), the
// code virt-launcher runs, driven from the command line so a test can point it at a kvrs hook
// sidecar: Collect waits for --sidecars sockets under /var/run/kubevirt-hooks, OnDefineDomain
// passes --domain (XML) and --vmi (JSON) through them, the answer is parsed into KubeVirt's domain
// type as its launcher does before defining it, and Shutdown is called. Prints one JSON object:
// {"domainXML": ..., "sysInfo": ...}; any error exits 1 with it on stderr.
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	sidecars := flag.Uint("sidecars", 1, "hook sidecars to collect")
	timeout := flag.Duration("timeout", 20*time.Second, "collect timeout")
	domainFile := flag.String("domain", "", "domain XML file")
	vmiFile := flag.String("vmi", "", "VMI JSON file")
	flag.Parse()

	domainXML, err := os.ReadFile(*domainFile)
	if err != nil {
		fail("read domain: %v", err)
	}
	vmiJSON, err := os.ReadFile(*vmiFile)
	if err != nil {
		fail("read VMI: %v", err)
	}
	spec := &api.DomainSpec{}
	if err := xml.Unmarshal(domainXML, spec); err != nil {
		fail("parse domain: %v", err)
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(vmiJSON, vmi); err != nil {
		fail("parse VMI: %v", err)
	}

	manager := hooks.GetManager()
	if err := manager.Collect(*sidecars, *timeout); err != nil {
		fail("Collect: %v", err)
	}
	out, err := manager.OnDefineDomain(spec, vmi)
	if err != nil {
		fail("OnDefineDomain: %v", err)
	}
	// As virt-launcher's ApplySidecarHooks: the answer must parse as a domain.
	result := &api.DomainSpec{}
	if err := xml.Unmarshal([]byte(out), result); err != nil {
		fail("the hook's domain does not parse: %v", err)
	}
	if err := manager.Shutdown(); err != nil {
		fail("Shutdown: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{
		"domainXML": out,
		"sysInfo":   result.SysInfo,
	}); err != nil {
		fail("write result: %v", err)
	}
}
