//! Running a piece of the vector search compiled for an instruction set
//! the default x86-64 target does not assume, where the CPU has it, and as
//! it is elsewhere. `work` must inline what it calls (`#[inline(always)]`,
//! on the closure too) for the instructions to reach it; a loop written as
//! `collect` runs in a function of its own and does not get them.

/// Defines `$name(work)`: `work` run compiled for `$feature` where the CPU
/// has it.
macro_rules! compiled_for {
    ($(#[$doc:meta])* $name:ident, $feature:tt) => {
        $(#[$doc])*
        #[inline(always)]
        pub(super) fn $name<R>(work: impl FnOnce() -> R) -> R {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!($feature) {
                #[target_feature(enable = $feature)]
                unsafe fn compiled<R>(work: impl FnOnce() -> R) -> R {
                    work()
                }
                // SAFETY: the CPU supports the feature, checked just above.
                return unsafe { compiled(work) };
            }
            work()
        }
    };
}

compiled_for!(
    /// POPCNT (nearly every x86-64 since 2008): counting the differing bits
    /// of a million rows' sign words is about three times faster with it.
    with_popcnt,
    "popcnt"
);

compiled_for!(
    /// AVX2: rescoring's int8 × f32 products in eight lanes an instruction
    /// instead of the default target's four. Without FMA, which is not
    /// enabled, each product and sum rounds as it does without AVX2, in the
    /// same order: the same bits on every CPU (tested).
    with_avx2,
    "avx2"
);
