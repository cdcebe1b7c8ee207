//! The pod's exclusive CPUs as a pool that vCPUs, supplemental IO threads and the emulator
//! thread are taken from, in KubeVirt's order.
//!
//! Why a pool and not "vCPU *i* gets the *i*-th CPU": KubeVirt keeps a guest core's threads on
//! one host core (SMT siblings) and one NUMA cell where it can, and the CPUs left over after the
//! vCPUs go, one at a time, to the supplemental-pool IO threads and then to the emulator thread.
//! Which host CPU each thread gets is visible in `<cputune>`, so the assignment order is part of
//! the domain XML and is reproduced step by step here.

use crate::context::HostTopology;

/// The threads of one host NUMA cell still free, grouped as KubeVirt groups them.
#[derive(Debug, Clone, Default)]
struct Cell {
    /// Host cores with at least `threads_per_core` free threads.
    full_cores: Vec<Vec<u32>>,
    /// Free threads of cores too broken up to hold a whole guest core.
    fragmented: Vec<u32>,
    threads_per_core: usize,
}

impl Cell {
    /// Takes the rest of `full_cores[0]` when it can no longer hold a guest core.
    fn retire_first_core_if_short(&mut self) {
        if self.full_cores[0].len() < self.threads_per_core {
            let rest = self.full_cores.remove(0);
            self.fragmented.extend(rest);
        }
    }

    /// A whole guest core's threads from one host core, if a full core is left.
    fn take_unfragmented(&mut self) -> Option<Vec<u32>> {
        let first = self.full_cores.first_mut()?;
        let selected: Vec<u32> = first.drain(..self.threads_per_core).collect();
        self.retire_first_core_if_short();
        Some(selected)
    }

    /// A guest core's threads from the fragmented threads of this cell.
    fn take_fragmented(&mut self) -> Option<Vec<u32>> {
        if self.threads_per_core > self.fragmented.len() {
            return None;
        }
        Some(self.fragmented.drain(..self.threads_per_core).collect())
    }

    /// Up to `threads` fragmented threads (a guest core may then span cells).
    fn take_fragmented_up_to(&mut self, threads: usize) -> Vec<u32> {
        let n = threads.min(self.fragmented.len());
        self.fragmented.drain(..n).collect()
    }

    /// One thread, fragmented ones first.
    fn take_thread(&mut self) -> Option<u32> {
        if !self.fragmented.is_empty() {
            return Some(self.fragmented.remove(0));
        }
        let first = self.full_cores.first_mut()?;
        let thread = first.remove(0);
        self.retire_first_core_if_short();
        Some(thread)
    }

    fn is_empty(&self) -> bool {
        self.fragmented.is_empty() && self.full_cores.is_empty()
    }
}

/// Why the vCPUs did not fit the pod's CPUs; the text is KubeVirt's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PoolError {
    /// Fewer free threads than the guest's cores need.
    #[error("not enough exclusive threads provided, could not fit {0} core(s)")]
    NotEnoughThreads(usize),
    /// Enough threads, but a guest core would span host NUMA cells (strict pool only).
    #[error("could not fit {0} core(s) without crossing numa cell boundaries for individual cores")]
    WouldCrossCells(usize),
    /// No thread left for an IO thread or the emulator thread.
    #[error("no remaining unassigned threads")]
    Exhausted,
}

/// The pod's CPU set, arranged by host NUMA cell and core.
#[derive(Debug, Clone)]
pub(crate) struct CpuPool {
    cells: Vec<Cell>,
    threads_per_core: usize,
    /// Guest cores to place (cores x sockets).
    cores: usize,
    /// Strict pools (NUMA passthrough) never split a guest core across host cells.
    allow_cell_crossing: bool,
    available_threads: usize,
}

impl CpuPool {
    /// A pool of `cpu_set` for a guest of `cores` cores (sockets x cores) of `threads_per_core`
    /// threads. Without a host topology every CPU counts as its own core in one cell.
    pub(crate) fn new(
        cores: usize,
        threads_per_core: usize,
        topology: Option<&HostTopology>,
        cpu_set: &[u32],
        allow_cell_crossing: bool,
    ) -> CpuPool {
        let threads_per_core = threads_per_core.max(1);
        let cells = cores_by_cell(cpu_set, topology)
            .into_iter()
            .map(|cores_on_cell| {
                let mut cell = Cell {
                    threads_per_core,
                    ..Cell::default()
                };
                for core in cores_on_cell {
                    if core.len() >= threads_per_core {
                        cell.full_cores.push(core);
                    } else {
                        cell.fragmented.extend(core);
                    }
                }
                cell
            })
            .collect();
        CpuPool {
            cells,
            threads_per_core,
            cores,
            allow_cell_crossing,
            available_threads: cpu_set.len(),
        }
    }

    /// Host CPUs for every vCPU, in vCPU order: whole host cores first, then fragmented threads
    /// of one cell, then (relaxed pools) threads from anywhere.
    pub(crate) fn fit_cores(&mut self) -> Result<Vec<u32>, PoolError> {
        let mut threads = Vec::new();
        let mut remaining = self.fit_chunks(self.cores, &mut threads, Cell::take_unfragmented);
        if remaining > 0 {
            remaining = self.fit_chunks(remaining, &mut threads, Cell::take_fragmented);
        }
        if remaining > 0 && self.allow_cell_crossing {
            remaining = self.fit_unbound(remaining, &mut threads);
        }
        if remaining == 0 {
            return Ok(threads);
        }
        if self.allow_cell_crossing || self.available_threads < self.cores * self.threads_per_core {
            Err(PoolError::NotEnoughThreads(remaining))
        } else {
            Err(PoolError::WouldCrossCells(remaining))
        }
    }

    /// One more host CPU (for an IO thread or the emulator thread).
    pub(crate) fn fit_thread(&mut self) -> Result<u32, PoolError> {
        self.cells
            .iter_mut()
            .find(|c| !c.is_empty())
            .and_then(Cell::take_thread)
            .ok_or(PoolError::Exhausted)
    }

    /// Places up to `requested` guest cores with `take`, cell by cell; returns how many are left.
    fn fit_chunks(
        &mut self,
        mut requested: usize,
        threads: &mut Vec<u32>,
        take: fn(&mut Cell) -> Option<Vec<u32>>,
    ) -> usize {
        if requested == 0 {
            return 0;
        }
        for cell in &mut self.cells {
            while let Some(chunk) = take(cell).filter(|c| !c.is_empty()) {
                threads.extend(chunk);
                requested -= 1;
                if requested == 0 {
                    return 0;
                }
            }
        }
        requested
    }

    /// Places the remaining guest cores' threads wherever fragmented threads are left.
    fn fit_unbound(&mut self, requested: usize, threads: &mut Vec<u32>) -> usize {
        let mut remaining_threads = self.threads_per_core * requested;
        for cell in &mut self.cells {
            loop {
                let chunk = cell.take_fragmented_up_to(remaining_threads);
                if chunk.is_empty() {
                    break;
                }
                remaining_threads -= chunk.len();
                threads.extend(chunk);
                if remaining_threads == 0 {
                    return 0;
                }
            }
        }
        remaining_threads / self.threads_per_core
    }
}

/// The CPU set grouped as cells → host cores → free threads, in the host topology's order; a
/// core whose threads are all outside the set is kept (empty) as KubeVirt keeps it.
fn cores_by_cell(cpu_set: &[u32], topology: Option<&HostTopology>) -> Vec<Vec<Vec<u32>>> {
    let Some(topology) = topology.filter(|t| !t.cells.is_empty()) else {
        return vec![cpu_set.iter().map(|&c| vec![c]).collect()];
    };
    let in_set: std::collections::BTreeSet<u32> = cpu_set.iter().copied().collect();
    let mut visited = std::collections::BTreeSet::new();
    topology
        .cells
        .iter()
        .map(|cell| {
            let mut cores = Vec::new();
            for (id, siblings) in &cell.cpus {
                if visited.contains(id) {
                    continue;
                }
                let members: &[u32] = if siblings.is_empty() {
                    std::slice::from_ref(id)
                } else {
                    siblings
                };
                let mut core = Vec::new();
                for &thread in members {
                    visited.insert(thread);
                    if in_set.contains(&thread) {
                        core.push(thread);
                    }
                }
                cores.push(core);
            }
            cores
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::HostNumaCell;

    fn two_cells() -> HostTopology {
        // Cell 0: CPUs 0-3, cell 1: CPUs 4-7, siblings (2k, 2k+1).
        HostTopology {
            cells: (0..2u32)
                .map(|cell| HostNumaCell {
                    id: cell,
                    cpus: (cell * 4..cell * 4 + 4)
                        .map(|c| (c, vec![c & !1, c | 1]))
                        .collect(),
                    ..HostNumaCell::default()
                })
                .collect(),
        }
    }

    #[test]
    fn single_thread_cores_take_cpus_in_order_and_leftovers_follow() {
        let set: Vec<u32> = (0..6).collect();
        let mut pool = CpuPool::new(4, 1, Some(&HostTopology::oracle_node()), &set, true);
        assert_eq!(pool.fit_cores(), Ok(vec![0, 1, 2, 3]));
        assert_eq!(pool.fit_thread(), Ok(4));
        assert_eq!(pool.fit_thread(), Ok(5));
        assert_eq!(pool.fit_thread(), Err(PoolError::Exhausted));
    }

    #[test]
    fn guest_cores_stay_on_whole_host_cores() {
        // CPU 1 is missing: core {0,1} cannot hold a 2-thread guest core, so it is skipped
        // and its thread 0 is left for the emulator.
        let set = [0, 2, 3, 4, 5];
        let mut pool = CpuPool::new(2, 2, Some(&HostTopology::oracle_node()), &set, true);
        assert_eq!(pool.fit_cores(), Ok(vec![2, 3, 4, 5]));
        assert_eq!(pool.fit_thread(), Ok(0));
    }

    #[test]
    fn strict_pool_refuses_a_core_split_across_cells() {
        // One free thread per host core in each cell: a 2-thread guest core would have to span.
        let set = [0, 2, 4, 6];
        let mut pool = CpuPool::new(2, 2, Some(&two_cells()), &set, false);
        assert_eq!(pool.fit_cores(), Ok(vec![0, 2, 4, 6]));
        let set = [0, 4];
        let mut strict = CpuPool::new(1, 2, Some(&two_cells()), &set, false);
        assert_eq!(strict.fit_cores(), Err(PoolError::WouldCrossCells(1)));
        let mut relaxed = CpuPool::new(1, 2, Some(&two_cells()), &set, true);
        assert_eq!(relaxed.fit_cores(), Ok(vec![0, 4]));
    }

    #[test]
    fn too_few_threads_is_reported_with_kubevirts_words() {
        let mut pool = CpuPool::new(3, 1, None, &[0, 1], true);
        let err = pool.fit_cores().unwrap_err();
        assert_eq!(
            err.to_string(),
            "not enough exclusive threads provided, could not fit 1 core(s)"
        );
    }
}
