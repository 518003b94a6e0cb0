//! A global allocator that puts large allocations on transparent huge
//! pages, as NumPy does for its arrays (`madvise(MADV_HUGEPAGE)` from
//! 4 MiB): the `spindle` binary installs it, and a library user may too.
//!
//! Why: a sparse kernel gathers rows of a dense operand at scattered
//! coordinates, and with 4 KiB pages nearly every gathered row of an
//! operand larger than the TLB's reach (a few MiB) costs a page walk. Where
//! the kernel's system leaves huge pages to `madvise` (the usual default),
//! an array from `Vec` never gets them while the Python baselines' NumPy
//! arrays do. GNN kernel 2 on ca-CondMat (NK = 128, operands of 24 MB): 17
//! to 19 ms on 4 KiB pages, 13.5 to 15 on huge pages, in a C harness. Which
//! of glibc's heap or mmap a buffer came from also changed its time by up
//! to 25% from one launch to the next (the heap's reuse of freed memory);
//! here every large buffer is a fresh, aligned mapping.
//!
//! Smaller blocks from [`LINE_FROM`] bytes on start on a cache line (64
//! bytes, where `malloc` promises 16): a kernel's 64-byte vector loads of
//! a row then never straddle two lines, and its time no longer depends on
//! where the allocator happened to put each operand. GNN kernel 1 on
//! karate (NH 128, NJ 32, f64) took 9.6 us with its operands on 64-byte
//! boundaries and 14 to 18 us 16 or 48 bytes off them, in a C harness.
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: spindle::hugepages::HugePages = spindle::hugepages::HugePages;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations from this size on are mapped on their own, 2 MiB aligned,
/// and advised to use huge pages (NumPy's threshold).
pub const THRESHOLD: usize = 4 << 20;

/// Blocks from this size on (and below [`THRESHOLD`]) are aligned to
/// [`LINE`] bytes at least.
pub const LINE_FROM: usize = 256;

/// A cache line, and the width of an AVX-512 vector.
pub const LINE: usize = 64;

/// The size of a huge page on x86-64 and (with 4 KiB base pages) AArch64.
const HUGE: usize = 2 << 20;

/// [`System`], except that allocations of [`THRESHOLD`] bytes or more are
/// anonymous mappings aligned to 2 MiB and advised `MADV_HUGEPAGE` (on
/// Linux; elsewhere everything is [`System`]'s).
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePages;

/// Whether this layout is mapped by [`HugePages`] rather than [`System`].
fn mapped(layout: Layout) -> bool {
    cfg!(target_os = "linux") && layout.size() >= THRESHOLD && layout.align() <= HUGE
}

/// The layout [`System`] serves for a block not mapped: from [`LINE_FROM`]
/// bytes on, aligned to a cache line at least.
fn system(layout: Layout) -> Layout {
    match layout.size() >= LINE_FROM && layout.align() < LINE {
        // Refused only for a size within a line of isize::MAX: such a block
        // keeps its own layout (here and when it is freed alike).
        true => Layout::from_size_align(layout.size(), LINE).unwrap_or(layout),
        false => layout,
    }
}

/// The length of the mapping kept for `size` bytes: whole huge pages.
fn kept(size: usize) -> usize {
    size.div_ceil(HUGE) * HUGE
}

#[cfg(target_os = "linux")]
unsafe fn map(size: usize) -> *mut u8 {
    let len = kept(size);
    // Map one huge page more than kept, then unmap the ends so that what
    // stays starts on a 2 MiB boundary.
    let Some(over) = len.checked_add(HUGE) else { return std::ptr::null_mut() };
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing touches no existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE);
    let head = aligned - start;
    let tail = over - head - len;
    // SAFETY: both ranges lie inside the mapping just made and outside
    // the part kept; the advice only changes how its pages are backed.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Refused where the kernel has no transparent huge pages: the
        // mapping then stays on base pages, which is still correct.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    aligned as *mut u8
}

#[cfg(not(target_os = "linux"))]
unsafe fn map(_size: usize) -> *mut u8 {
    unreachable!("only Linux maps large allocations itself")
}

#[cfg(target_os = "linux")]
unsafe fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: `ptr` is the start of a mapping of `kept(size)` bytes made by
    // `map` for the same layout, no longer in use.
    unsafe { libc::munmap(ptr.cast(), kept(size)) };
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap(_ptr: *mut u8, _size: usize) {
    unreachable!("only Linux maps large allocations itself")
}

// SAFETY: small layouts go to `System` (from 256 bytes with a stricter
// alignment, freed and resized with that same derived layout); large ones get a fresh
// mapping of at least their size, aligned to 2 MiB (which satisfies every
// alignment up to it), zeroed by the kernel, and are unmapped with the
// length they were mapped with, derived from the same layout.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match mapped(layout) {
            // SAFETY: the caller's contract for `alloc`.
            true => unsafe { map(layout.size()) },
            false => unsafe { System.alloc(system(layout)) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match mapped(layout) {
            // A fresh anonymous mapping reads as zeros.
            true => unsafe { map(layout.size()) },
            false => unsafe { System.alloc_zeroed(system(layout)) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match mapped(layout) {
            // SAFETY: `ptr` was allocated by `map` for this layout.
            true => unsafe { unmap(ptr, layout.size()) },
            false => unsafe { System.dealloc(ptr, system(layout)) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`: `layout` describes
        // `ptr`'s block and `new_size` is valid for its alignment.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !mapped(layout) && !mapped(new) && system(layout).align() == system(new).align() {
            return unsafe { System.realloc(ptr, system(layout), new_size) };
        }
        // Across a threshold, or between two mappings: a new block and a
        // copy of what both hold.
        let to = unsafe { self.alloc(new) };
        if !to.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `len` bytes at `p` with their offsets (mod 256).
    unsafe fn fill(p: *mut u8, len: usize) {
        let block = unsafe { std::slice::from_raw_parts_mut(p, len) };
        block.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    }

    #[test]
    fn blocks_from_256_bytes_start_on_a_line_and_keep_their_contents_when_resized() {
        let a = HugePages;
        for size in [8, 255, 256, 1000, 40_000] {
            let mut layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: as in the test below.
            unsafe {
                let mut p = a.alloc(layout);
                assert!(!p.is_null());
                assert!((p as usize).is_multiple_of(LINE) || size < LINE_FROM, "{size} bytes at {p:?}");
                for new_size in [size * 3, 100, 300] {
                    fill(p, layout.size());
                    p = a.realloc(p, layout, new_size);
                    assert!(!p.is_null());
                    if new_size >= LINE_FROM {
                        assert_eq!(p as usize % LINE, 0, "{size} -> {new_size} at {p:?}");
                    }
                    let kept = layout.size().min(new_size);
                    let moved = std::slice::from_raw_parts(p, kept);
                    assert!(moved.iter().enumerate().all(|(i, &b)| b == i as u8), "{size} -> {new_size}");
                    layout = Layout::from_size_align(new_size, 8).unwrap();
                }
                a.dealloc(p, layout);
            }
        }
    }

    #[test]
    fn large_blocks_are_aligned_zeroed_and_keep_their_contents_when_resized() {
        let a = HugePages;
        for size in [THRESHOLD - 8, THRESHOLD, THRESHOLD + 4096 + 8, 3 * THRESHOLD + 1] {
            let mut layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: non-zero sizes; each block is used within its size
            // and freed once, with the layout it has then.
            unsafe {
                let mut p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                if mapped(layout) {
                    assert_eq!(p as usize % HUGE, 0, "{size} bytes at {p:?}");
                }
                let block = std::slice::from_raw_parts(p, size);
                assert!(block.iter().all(|&b| b == 0), "{size} bytes not zeroed");
                // Grow (across the threshold or between mappings), then shrink.
                for new_size in [size + THRESHOLD, size / 2] {
                    fill(p, layout.size());
                    p = a.realloc(p, layout, new_size);
                    assert!(!p.is_null());
                    let kept = layout.size().min(new_size);
                    let moved = std::slice::from_raw_parts(p, kept);
                    assert!(moved.iter().enumerate().all(|(i, &b)| b == i as u8), "{size} -> {new_size}");
                    layout = Layout::from_size_align(new_size, 8).unwrap();
                }
                a.dealloc(p, layout);
            }
        }
    }
}
