//! The global allocator of Corral's binaries: mimalloc. A pass of the cycle makes and drops a
//! few hundred small vectors, and under glibc's malloc the allocator took a quarter of a
//! replay's instructions.
//!
//! The `mimalloc` crate asks for every block through `mi_malloc_aligned`, whatever the
//! alignment; when no free block of the size is at hand, that path over-allocates (24 bytes
//! take a 32-byte block) and took 5 % of a replay's instructions. Every mimalloc block is
//! aligned to a word at least (blocks are whole words, and a page's first block is 16-byte
//! aligned), so a request aligned to a word or less takes the plain calls here.

use std::alloc::{GlobalAlloc, Layout};

use libmimalloc_sys as mi;

/// The alignment every block of mimalloc has.
const WORD: usize = std::mem::size_of::<usize>();

/// `#[global_allocator] static ALLOCATOR: corral_alloc::Mimalloc = corral_alloc::Mimalloc;`
pub struct Mimalloc;

#[inline]
fn plain(layout: &Layout) -> bool {
    layout.align() <= WORD
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of both
// kinds of call); a plain call is used only where any block has the alignment asked.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = if plain(&layout) {
            // SAFETY: a call to mimalloc with a size, no pointer given.
            unsafe { mi::mi_malloc(layout.size()) }
        } else {
            // SAFETY: as above; a Layout's alignment is a power of two.
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) }
        };
        block.cast()
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let block = if plain(&layout) {
            // SAFETY: as in `alloc`.
            unsafe { mi::mi_zalloc(layout.size()) }
        } else {
            // SAFETY: as in `alloc`.
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) }
        };
        block.cast()
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller gives a block this allocator returned.
        unsafe { mi::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let block = if plain(&layout) {
            // SAFETY: the caller gives a block this allocator returned, with its layout.
            unsafe { mi::mi_realloc(ptr.cast(), new_size) }
        } else {
            // SAFETY: as above.
            unsafe { mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()) }
        };
        block.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks have the alignment asked and the size (written whole, read back), zeroed ones
    /// are zero, and a block grown keeps what it held: for sizes around every bin edge and
    /// alignments from a byte to a page.
    #[test]
    fn blocks_have_the_alignment_size_and_contents_asked() {
        let a = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=80).chain([127, 128, 129, 1000, 4096, 70_000]) {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: a non-zero size; each block is freed once, with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    p.write_bytes(0xA5, size);
                    let grown = a.realloc(p, layout, size * 3);
                    assert!(
                        (grown as usize).is_multiple_of(align),
                        "{size} {align} grown"
                    );
                    let kept = std::slice::from_raw_parts(grown, size);
                    assert!(kept.iter().all(|&b| b == 0xA5), "{size} {align} kept");
                    a.dealloc(
                        grown,
                        Layout::from_size_align(size * 3, align).expect("valid"),
                    );

                    let z = a.alloc_zeroed(layout);
                    assert!(
                        !z.is_null() && (z as usize).is_multiple_of(align),
                        "{size} {align} zeroed"
                    );
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
