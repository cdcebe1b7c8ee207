//! issue 17: counts that come from quantities are bounded before the CPU configurator allocates
//! one entry per vCPU (a huge socket count aborted the process allocating 128 GiB).

use kvrs_converter::topology::MAX_VCPUS;
use kvrs_converter::{ConverterContext, convert};
use serde_json::json;

fn convert_cpu(cpu: serde_json::Value, resources: serde_json::Value) -> Result<u32, String> {
    let vmi = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {"domain": {"devices": {}, "cpu": cpu,
                            "resources": resources, "memory": {"guest": "64Mi"}}}
    }))
    .unwrap();
    convert(&vmi, &ConverterContext::default())
        .map(|d| d.vcpu.map_or(0, |v| v.cpus))
        .map_err(|e| e.to_string())
}

#[test]
fn huge_topologies_are_refused_with_their_field() {
    assert_eq!(
        convert_cpu(json!({"sockets": 65536, "cores": 65536}), json!({})),
        Err(
            "spec.domain.cpu.sockets: 65536 vCPUs, more than the 1024 vCPUs a domain can have"
                .into()
        )
    );
    assert_eq!(
        convert_cpu(json!({"sockets": 32, "cores": 32, "threads": 2}), json!({})),
        Err("spec.domain.cpu: 2048 vCPUs, more than the 1024 vCPUs a domain can have".into())
    );
    assert_eq!(
        convert_cpu(
            json!({"sockets": 1, "maxSockets": 2_000_000_000_i64}),
            json!({})
        ),
        Err(
            "spec.domain.cpu.maxSockets: 2000000000 sockets x 1 cores x 1 threads is 2000000000 \
             hot-pluggable vCPUs, more than the 1024 vCPUs a domain can have"
                .into()
        )
    );
    assert_eq!(
        convert_cpu(
            json!({"sockets": 2, "maxSockets": 512, "cores": 2}),
            json!({})
        ),
        Ok(1024)
    );
}

#[test]
fn cpu_quantities_that_become_sockets_are_bounded() {
    // `8Ei` used to be converted with one vCPU (the value did not fit and became 0).
    assert_eq!(
        convert_cpu(json!({}), json!({"limits": {"cpu": "8Ei"}})),
        Err("spec.domain.resources.limits.cpu: quantity \"8Ei\" is too large".into())
    );
    assert_eq!(
        convert_cpu(json!({}), json!({"requests": {"cpu": "7Ei"}})),
        Err(
            "spec.domain.resources.requests.cpu: 8070450532247928832 vCPUs, more than the 1024 \
             vCPUs a domain can have"
                .into()
        )
    );
    assert_eq!(
        convert_cpu(json!({}), json!({"limits": {"cpu": MAX_VCPUS.to_string()}})),
        Ok(MAX_VCPUS)
    );
}
