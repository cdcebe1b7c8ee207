//! `<iothreads>`: how many IO threads the disks use.

use super::Configurator;
use crate::domain::{Domain, IoThreads as DomIoThreads};
use crate::error::ConvertError;
use crate::iothreads::{has_io_threads, io_thread_counts};
use kvrs_api::VirtualMachineInstance;

/// Writes the IO thread count.
pub(super) struct IoThreads;

impl Configurator for IoThreads {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        if !has_io_threads(vmi) {
            return Ok(());
        }
        let (total, _) = io_thread_counts(vmi);
        if total == 0 {
            return Ok(());
        }
        domain.iothreads = Some(DomIoThreads { count: total });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn count(domain_spec: Value) -> Option<u32> {
        let vmi = vmi(json!({"domain": domain_spec}));
        run(&IoThreads, &vmi).unwrap().iothreads.map(|t| t.count)
    }

    fn disks(n: usize, dedicated: usize) -> Value {
        let disk = |i: usize| json!({"name": format!("d{i}"), "disk": {"bus": "virtio"}, "dedicatedIOThread": i < dedicated});
        Value::Array((0..n).map(disk).collect())
    }

    #[test]
    fn no_policy_and_no_dedicated_disk_means_no_io_threads() {
        assert_eq!(count(json!({"devices": {"disks": disks(3, 0)}})), None);
    }

    #[test]
    fn shared_policy_counts_one_shared_thread_plus_one_per_dedicated_disk() {
        let shared = |n, dedicated| {
            count(json!({"ioThreadsPolicy": "shared", "devices": {"disks": disks(n, dedicated)}}))
        };
        assert_eq!(shared(3, 0), Some(1));
        assert_eq!(shared(3, 2), Some(3));
        // A dedicated disk alone asks for IO threads too.
        assert_eq!(count(json!({"devices": {"disks": disks(2, 1)}})), Some(2));
    }

    #[test]
    fn auto_policy_allows_two_threads_per_cpu() {
        let auto = |cpus: &str, n| {
            count(
                json!({"ioThreadsPolicy": "auto", "devices": {"disks": disks(n, 0)},
                "resources": {"requests": {"cpu": cpus}}}),
            )
        };
        assert_eq!(auto("2", 3), Some(3));
        assert_eq!(auto("2", 6), Some(4));
    }

    #[test]
    fn a_supplemental_pool_has_the_count_it_asks_for() {
        let pool = json!({"ioThreadsPolicy": "supplementalPool",
            "ioThreads": {"supplementalPoolThreadCount": 4}, "devices": {"disks": disks(1, 0)}});
        assert_eq!(count(pool), Some(4));
        let empty = json!({"ioThreadsPolicy": "supplementalPool",
            "ioThreads": {"supplementalPoolThreadCount": 0}, "devices": {}});
        assert_eq!(count(empty), None);
    }
}
