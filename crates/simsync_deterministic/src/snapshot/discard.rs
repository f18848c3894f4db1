//! Old values a rollback replaces, dropped off the session's thread.
//!
//! Copying Rapier's narrow phase by `clone_from` allocates the copy, buffers for every contact
//! pair, and then frees the predicted world's old value, as many buffers again, on the thread
//! that runs the session update. The free is pure waste for the rollback: no result
//! depends on it. [`replace_with_clone`] puts the copy in place and hands the old value to
//! Bevy's [`ComputeTaskPool`], whose thread frees it while the session goes on simulating (see
//! `docs/performance.md`). Nothing observable changes: the destination holds the same value
//! either way, and freeing order does not touch simulation state.

use bevy::tasks::ComputeTaskPool;

/// Drops `value` on a thread of Bevy's compute pool, or right here when the App has no compute
/// pool (it was built without `TaskPoolPlugin`) or `SIMSYNC_ROLLBACK_INLINE_DROP` is set (a
/// measuring aid).
pub(crate) fn discard<T: Send + 'static>(value: T) {
    static INLINE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *INLINE.get_or_init(|| std::env::var_os("SIMSYNC_ROLLBACK_INLINE_DROP").is_some()) {
        return drop(value);
    }
    match ComputeTaskPool::try_get() {
        Some(pool) => pool.spawn(async move { drop(value) }).detach(),
        None => drop(value),
    }
}

/// Makes `to` equal `from` (a clone of it) and [`discard`]s the value `to` held.
pub(crate) fn replace_with_clone<T: Clone + Send + 'static>(to: &mut T, from: &T) {
    discard(std::mem::replace(to, from.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_replaced_value_equals_its_source_and_the_old_one_is_freed() {
        bevy::tasks::ComputeTaskPool::get_or_init(bevy::tasks::TaskPool::default);
        let old = Arc::new(vec![1u8; 1_000]);
        let watch = Arc::downgrade(&old);
        let mut to = old;
        let from = Arc::new(vec![2u8; 10]);
        replace_with_clone(&mut to, &from);
        assert_eq!(*to, vec![2u8; 10]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while watch.upgrade().is_some() {
            assert!(Instant::now() < deadline, "the old value was never freed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
