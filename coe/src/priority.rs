//! The scheduling priority of the threads whose work can wait while the switches' cannot.
//!
//! Two system calls (`getpriority` and `setpriority` on the calling thread); no other I/O.
//!
//! On a 30,000-service load the REST publisher translates the services while the node's
//! engine renders the parts already published and `ovs-vswitchd` applies the bundles sent:
//! three busy threads on two cores. The switch is the slowest of the three, and it and the
//! engine that feeds it are what the load waits for, so the translation gives way to them
//! when the cores are contended, and runs at once when they are not (`docs/performance.md`).

/// How much lower than the process's own nice value a background thread runs: its share of
/// a contended core is then about a tenth of a normal thread's.
pub const BACKGROUND_NICE: i32 = 10;

/// The highest nice value (the lowest priority).
const NICE_MAX: i32 = 19;

/// Lowers the calling thread's priority by [`BACKGROUND_NICE`] (to at most nice 19). Threads
/// it starts afterwards inherit that priority. On Linux the nice value is per thread, so the
/// process's other threads keep theirs.
pub fn background_thread() -> std::io::Result<()> {
    let me = rustix::thread::gettid();
    let now = rustix::process::getpriority_process(Some(me))?;
    let lower = now.saturating_add(BACKGROUND_NICE).min(NICE_MAX);
    if lower > now {
        rustix::process::setpriority_process(Some(me), lower)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread that asks runs lower; the thread that started it keeps its priority.
    #[test]
    fn only_the_calling_thread_runs_lower() -> std::io::Result<()> {
        let nice = || -> std::io::Result<i32> {
            Ok(rustix::process::getpriority_process(Some(
                rustix::thread::gettid(),
            ))?)
        };
        let here = nice()?;
        let there = std::thread::spawn(move || {
            background_thread()?;
            nice()
        })
        .join()
        .map_err(|_| std::io::Error::other("the thread panicked"))??;
        assert_eq!(there, (here + BACKGROUND_NICE).min(NICE_MAX));
        assert_eq!(nice()?, here);
        Ok(())
    }
}
