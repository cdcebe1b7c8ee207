//! `<iothreads>`: how many IO threads the disks use.

use super::Configurator;
use crate::domain::{Domain, IoThreads as DomIoThreads};
use crate::error::ConvertError;
use crate::iothreads::{has_io_threads, io_thread_counts};
use kvrs_api::VirtualMachineInstance;

/// Writes the IO thread count.
pub struct IoThreads;

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
