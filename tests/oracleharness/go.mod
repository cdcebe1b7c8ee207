// The skeleton the controller oracle harnesses share (tests/migration, tests/vmistorage): the
// time shift and batch run of main, the recording reactor, event recorder and queue log, the
// fake clients, the launcher template service and the fixture loading. Each harness requires it
// through a replace directive to this directory, and its own go.mod (replace directives apply
// in the main module only) and go.sum resolve KubeVirt v1.9.0 for both: this module is built
// only as their dependency (scripts/migration-harness.sh, scripts/vmistorage-harness.sh, whose
// cache hashes cover its files), so it has no go.sum of its own.
module kvrs.dev/tests/oracleharness

go 1.26.0

require (
	go.uber.org/mock v0.5.1
	k8s.io/api v0.34.3
	k8s.io/apimachinery v0.34.3
	k8s.io/client-go v12.0.0+incompatible
	kubevirt.io/api v1.9.0
	kubevirt.io/client-go v1.9.0
	kubevirt.io/kubevirt v1.9.0
)
