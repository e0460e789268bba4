//! Two pieces of CPU work at once: the second on a scoped thread of its own, the first here.
//!
//! A container PUT of 30,000 items spends tens of milliseconds in each of parsing its halves,
//! applying it and encoding its log record; on two cores they overlap. Below [`WORTH_A_THREAD`]
//! items a thread (tens of microseconds) costs more than it saves, and the callers run both
//! here.
//!
//! Pure: no I/O.

/// How many items (list entries, a change's effects) make work worth a thread of its own.
pub const WORTH_A_THREAD: usize = 2_048;

/// Runs `here` on this thread and `there` on a scoped thread beside it; a panic in `there`
/// is raised again here.
pub(crate) fn join<A, B: Send>(
    here: impl FnOnce() -> A,
    there: impl FnOnce() -> B + Send,
) -> (A, B) {
    std::thread::scope(|scope| {
        let there = scope.spawn(there);
        let a = here();
        match there.join() {
            Ok(b) => (a, b),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// [`join`] for work over `items` items: beside each other from [`WORTH_A_THREAD`] items on,
/// one after the other (`here` first) below.
pub(crate) fn join_for<A, B: Send>(
    items: usize,
    here: impl FnOnce() -> A,
    there: impl FnOnce() -> B + Send,
) -> (A, B) {
    if items >= WORTH_A_THREAD {
        join(here, there)
    } else {
        let a = here();
        (a, there())
    }
}

/// `f` over the two halves of `items`, the second on a scoped thread, from [`WORTH_A_THREAD`]
/// items on; below, `f` over all of them here and over none (`items.len()`, `&[]`) for the
/// second. `f` gets each half's first index in `items`.
pub(crate) fn halves<T: Sync, R: Send>(items: &[T], f: impl Fn(usize, &[T]) -> R + Sync) -> (R, R) {
    if items.len() < WORTH_A_THREAD {
        return (f(0, items), f(items.len(), &[]));
    }
    let (first, second) = items.split_at(items.len() / 2);
    join(|| f(0, first), || f(first.len(), second))
}

/// Drops `value` on a thread of its own when it holds at least [`WORTH_A_THREAD`] items
/// (`items`), here otherwise: a write's 30,000 parsed items, or the list it replaced, take
/// milliseconds to free, which a caller holding the store's lock should not spend. Freeing
/// touches no shared state, so nothing waits for it.
pub(crate) fn drop_beside<T: Send + 'static>(value: T, items: usize) {
    if items >= WORTH_A_THREAD {
        // If no thread can start, `spawn` drops the closure, and the value with it, here.
        let _ = std::thread::Builder::new()
            .name("svcflow-drop".into())
            .spawn(move || drop(value));
    }
}
