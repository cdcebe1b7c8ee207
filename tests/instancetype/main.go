// kvrs instancetype harness: KubeVirt v1.9.0's own instancetype and preference code
// (kubevirt.io/kubevirt/pkg/instancetype/...), imported as a Go module, applied to the cases
// tests/instancetype_differential.rs sends, so that kvrs-instancetype can be compared with it.
//
// Input (stdin): one JSON array of cases
//
//	{"name": "...", "vm": <VirtualMachine>, "instancetype": <instancetype object or null>,
//	 "preference": <preference object or null>, "kvrs": {"apply": <VMI spec>|null,
//	 "controller": <VMI spec>|null}}
//
// Output (stdout): one JSON array, a result per case, in order:
//
//	{"name": "...",
//	 "spread":       null | {"field": "...", "message": "..."},          validation.CheckSpreadCPUTopology
//	 "apply":        {"conflicts": [...], "message": "..."} |              apply.ApplyToVMI at spec.template.spec
//	                 {"spec": <VMI spec>, "annotations": {...}},
//	 "requirements": null | {"fields": "...", "error": "..."},           requirements.Check on the applied spec
//	 "controller":   {"error": "..."} | {"spec": ..., "annotations": ...}, the VM controller's VMI steps
//	 "expand":       {"error": "..."} | {"vm": <VirtualMachine>},          pkg/instancetype/expand Expand
//	 "panic":        "..." (a stage that panicked, and why),
//	 "kvrs":         {"apply": <VMI spec>, "controller": <VMI spec>}}    kvrs's specs through Go's types
//	 "kvrsExpand":   <VirtualMachine>                                    kvrs's expanded VM through Go's types
//
// The input's "kvrsExpand" (kvrs's expand-spec result, or null when kvrs refused) is decoded
// and encoded the same way. Expand runs with KubeVirt's own expander over a cluster whose
// KubeVirt CR has an empty configuration (default architecture amd64), its finders answering
// with the case's instancetype and preference.
//
// "kvrs" carries kvrs's own results decoded into KubeVirt's Go types and encoded again, so
// that both sides are compared as KubeVirt's types see them (omitempty, canonical quantities).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kubevirt.io/kubevirt/pkg/instancetype/annotations"
	"kubevirt.io/kubevirt/pkg/instancetype/apply"
	"kubevirt.io/kubevirt/pkg/instancetype/expand"
	preferenceannotations "kubevirt.io/kubevirt/pkg/instancetype/preference/annotations"
	preferenceapply "kubevirt.io/kubevirt/pkg/instancetype/preference/apply"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/requirements"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/validation"
	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
)

type object struct {
	Spec json.RawMessage `json:"spec"`
}

type input struct {
	Name         string                     `json:"name"`
	VM           virtv1.VirtualMachine      `json:"vm"`
	Instancetype *object                    `json:"instancetype"`
	Preference   *object                    `json:"preference"`
	Kvrs         map[string]json.RawMessage `json:"kvrs"`
	KvrsExpand   json.RawMessage            `json:"kvrsExpand"`
}

type applied struct {
	Conflicts   []string          `json:"conflicts,omitempty"`
	Message     string            `json:"message,omitempty"`
	Error       string            `json:"error,omitempty"`
	Spec        json.RawMessage   `json:"spec,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type expanded struct {
	Error string          `json:"error,omitempty"`
	VM    json.RawMessage `json:"vm,omitempty"`
}

type output struct {
	Name         string                     `json:"name"`
	Spread       map[string]string          `json:"spread"`
	Apply        *applied                   `json:"apply"`
	Requirements map[string]string          `json:"requirements"`
	Controller   *applied                   `json:"controller"`
	Expand       *expanded                  `json:"expand"`
	KvrsExpand   json.RawMessage            `json:"kvrsExpand,omitempty"`
	Panic        string                     `json:"panic,omitempty"`
	Kvrs         map[string]json.RawMessage `json:"kvrs,omitempty"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var cases []input
	if err := json.Unmarshal(raw, &cases); err != nil {
		fail(fmt.Errorf("cases: %w", err))
	}
	config := clusterConfig()
	results := make([]output, 0, len(cases))
	for i := range cases {
		results = append(results, run(&cases[i], config))
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(results); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kvrs-instancetype-harness:", err)
	os.Exit(1)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	return b
}

// guard runs one stage, turning a panic of KubeVirt's code into the case's "panic".
func guard(out *output, stage string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			out.Panic = fmt.Sprintf("%s: %v", stage, r)
		}
	}()
	f()
}

func specs(c *input) (*v1beta1.VirtualMachineInstancetypeSpec, *v1beta1.VirtualMachinePreferenceSpec) {
	var it *v1beta1.VirtualMachineInstancetypeSpec
	var pref *v1beta1.VirtualMachinePreferenceSpec
	if c.Instancetype != nil {
		it = &v1beta1.VirtualMachineInstancetypeSpec{}
		if err := json.Unmarshal(c.Instancetype.Spec, it); err != nil {
			fail(fmt.Errorf("%s: instancetype: %w", c.Name, err))
		}
	}
	if c.Preference != nil {
		pref = &v1beta1.VirtualMachinePreferenceSpec{}
		if err := json.Unmarshal(c.Preference.Spec, pref); err != nil {
			fail(fmt.Errorf("%s: preference: %w", c.Name, err))
		}
	}
	return it, pref
}

// clusterConfig is a cluster whose KubeVirt CR has an empty configuration (every default
// applies) and default architecture amd64, as kvrs's ClusterConfig::default().
func clusterConfig() *virtconfig.ClusterConfig {
	kv := &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Status:     virtv1.KubeVirtStatus{DefaultArchitecture: "amd64"},
	}
	cfg, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(kv, "amd64")
	return cfg
}

// finder answers KubeVirt's spec finders with the case's specs (nil when the VM references
// none, as the real finders answer).
type finder struct {
	it   *v1beta1.VirtualMachineInstancetypeSpec
	pref *v1beta1.VirtualMachinePreferenceSpec
}

func (f finder) Find(vm *virtv1.VirtualMachine) (*v1beta1.VirtualMachineInstancetypeSpec, error) {
	if vm.Spec.Instancetype == nil {
		return nil, nil
	}
	if f.it == nil {
		return nil, fmt.Errorf("the case references an instancetype it does not give")
	}
	return f.it.DeepCopy(), nil
}

func (f finder) FindPreference(vm *virtv1.VirtualMachine) (*v1beta1.VirtualMachinePreferenceSpec, error) {
	if vm.Spec.Preference == nil {
		return nil, nil
	}
	if f.pref == nil {
		return nil, fmt.Errorf("the case references a preference it does not give")
	}
	return f.pref.DeepCopy(), nil
}

func run(c *input, config *virtconfig.ClusterConfig) output {
	out := output{Name: c.Name}
	it, pref := specs(c)

	guard(&out, "spread", func() {
		if conflict := validation.CheckSpreadCPUTopology(it, pref); conflict != nil {
			out.Spread = map[string]string{"field": conflict.String(), "message": conflict.Error()}
		}
	})

	// The VM webhook's application, on a copy of the VM's template.
	vm := c.VM.DeepCopy()
	guard(&out, "apply", func() {
		conflicts := apply.NewVMIApplier().ApplyToVMI(
			k8sfield.NewPath("spec", "template", "spec"), it, pref,
			&vm.Spec.Template.Spec, &vm.Spec.Template.ObjectMeta)
		if len(conflicts) > 0 {
			paths := make([]string, 0, len(conflicts))
			for _, c := range conflicts {
				paths = append(paths, c.String())
			}
			out.Apply = &applied{Conflicts: paths, Message: conflicts.Error()}
			return
		}
		out.Apply = &applied{Spec: mustJSON(vm.Spec.Template.Spec), Annotations: vm.Spec.Template.ObjectMeta.Annotations}
	})

	if out.Apply != nil && len(out.Apply.Conflicts) == 0 && out.Panic == "" {
		guard(&out, "requirements", func() {
			conflicts, err := requirements.New().Check(it, pref, &vm.Spec.Template.Spec)
			if err != nil {
				out.Requirements = map[string]string{"fields": conflicts.String(), "error": err.Error()}
			}
		})
	}

	// The VM controller's steps on the VMI it creates (pkg/virt-controller/watch/vm: auto-attach
	// preferences, then pkg/instancetype/controller/vm ApplyToVMI: annotations, then the
	// application at spec), on the template as the VMI's spec and metadata.
	guard(&out, "controller", func() {
		vmi := &virtv1.VirtualMachineInstance{
			ObjectMeta: *c.VM.Spec.Template.ObjectMeta.DeepCopy(),
			Spec:       *c.VM.Spec.Template.Spec.DeepCopy(),
		}
		if c.VM.Spec.Preference != nil && pref != nil {
			preferenceapply.ApplyAutoAttachPreferences(pref, &vmi.Spec)
		}
		if it == nil && pref == nil {
			out.Controller = &applied{Spec: mustJSON(vmi.Spec), Annotations: vmi.Annotations}
			return
		}
		annotations.Set(&c.VM, vmi)
		preferenceannotations.Set(&c.VM, vmi)
		if conflicts := apply.NewVMIApplier().ApplyToVMI(
			k8sfield.NewPath("spec"), it, pref, &vmi.Spec, &vmi.ObjectMeta); len(conflicts) > 0 {
			out.Controller = &applied{Error: fmt.Sprintf("VMI conflicts with instancetype spec in fields: [%s]", conflicts.String())}
			return
		}
		out.Controller = &applied{Spec: mustJSON(vmi.Spec), Annotations: vmi.Annotations}
	})

	// virt-api's expand-spec (pkg/virt-api/rest/expand.go over pkg/instancetype/expand).
	guard(&out, "expand", func() {
		f := finder{it: it, pref: pref}
		vm, err := expand.New(config, f, f).Expand(c.VM.DeepCopy())
		if err != nil {
			out.Expand = &expanded{Error: err.Error()}
			return
		}
		out.Expand = &expanded{VM: mustJSON(vm)}
	})
	if len(c.KvrsExpand) > 0 && string(c.KvrsExpand) != "null" {
		var decoded virtv1.VirtualMachine
		if err := json.Unmarshal(c.KvrsExpand, &decoded); err != nil {
			out.KvrsExpand = mustJSON(map[string]string{"decodeError": err.Error()})
		} else {
			out.KvrsExpand = mustJSON(decoded)
		}
	}

	if len(c.Kvrs) > 0 {
		out.Kvrs = map[string]json.RawMessage{}
		for key, spec := range c.Kvrs {
			if string(spec) == "null" {
				continue
			}
			var decoded virtv1.VirtualMachineInstanceSpec
			if err := json.Unmarshal(spec, &decoded); err != nil {
				out.Kvrs[key] = mustJSON(map[string]string{"decodeError": err.Error()})
				continue
			}
			out.Kvrs[key] = mustJSON(decoded)
		}
	}
	return out
}
