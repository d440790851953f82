//! The cache's entries by slot.

/// One cache entry: everything a decision reads of a candidate in one 32-byte block (two per
/// cache line, never split), so that judging a candidate by a kept prediction costs one line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    last: u64,
    size: u64,
    /// The predicted distance made at the access `last` (valid when `has_kept`).
    kept: f64,
    obj: u32,
    has_kept: bool,
}

const EMPTY: Entry = Entry {
    last: 0,
    size: 0,
    kept: f64::NAN,
    obj: 0,
    has_kept: false,
};

/// The cache's entries, by slot (the handles the eviction order holds): object id, last access
/// (logical time), size in capacity units and the prediction kept for that access
/// (`reuse_predictions`). Slots are dense over the cached objects, so the hot loop touches
/// little memory beyond one per-object slot lookup.
#[derive(Debug, Clone, Default)]
pub struct Slots {
    entries: Vec<Entry>,
    /// The predictor's note of the last access ([`Predictor::note`]; 0 if it keeps none).
    ///
    /// [`Predictor::note`]: crate::mat::Predictor::note
    note: Vec<u64>,
    free: Vec<u32>,
}

impl Slots {
    /// A slot for object `obj`, accessed at `last` (noted `note`), of `size` capacity units.
    #[inline]
    pub fn alloc(&mut self, obj: u32, last: u64, size: u64, note: u64) -> u32 {
        let e = Entry {
            last,
            size,
            obj,
            ..EMPTY
        };
        match self.free.pop() {
            Some(s) => {
                self.entries[s as usize] = e;
                self.note[s as usize] = note;
                s
            }
            None => {
                self.entries.push(e);
                self.note.push(note);
                (self.entries.len() - 1) as u32
            }
        }
    }

    #[inline]
    pub fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Set `slot` (a handle the caller numbers, e.g. the flash cache's block slots, growing
    /// the vectors as needed) to object `obj`, accessed at `last` (noted `note`), of `size`
    /// capacity units. Not for use together with [`Slots::alloc`] (which numbers the slots
    /// itself).
    #[inline]
    pub fn set(&mut self, slot: u32, obj: u32, last: u64, size: u64, note: u64) {
        let i = slot as usize;
        if i >= self.entries.len() {
            let n = (i + 1).max(self.entries.len() * 2).max(16);
            self.entries.resize(n, EMPTY);
            self.note.resize(n, 0);
        }
        self.entries[i] = Entry {
            last,
            size,
            obj,
            ..EMPTY
        };
        self.note[i] = note;
    }

    /// A new access of the object in `slot` at `last` (noted `note`): a prediction kept for
    /// its previous access is dropped.
    #[inline]
    pub fn touch(&mut self, slot: u32, last: u64, note: u64) {
        let e = &mut self.entries[slot as usize];
        e.last = last;
        e.has_kept = false;
        self.note[slot as usize] = note;
    }

    #[inline]
    pub fn obj(&self, slot: u32) -> u32 {
        self.entries[slot as usize].obj
    }

    /// Logical time of the last access of the object in `slot`.
    #[inline]
    pub fn last(&self, slot: u32) -> u64 {
        self.entries[slot as usize].last
    }

    #[inline]
    pub fn size(&self, slot: u32) -> u64 {
        self.entries[slot as usize].size
    }

    #[inline]
    pub fn note(&self, slot: u32) -> u64 {
        self.note[slot as usize]
    }

    /// The predicted distance kept for the object in `slot` at its last access, if any.
    #[inline]
    pub fn kept(&self, slot: u32) -> Option<f64> {
        let e = &self.entries[slot as usize];
        e.has_kept.then_some(e.kept)
    }

    /// Keep `d`, predicted for the object in `slot` at its last access, until its next one.
    #[inline]
    pub fn keep(&mut self, slot: u32, d: f64) {
        let e = &mut self.entries[slot as usize];
        e.kept = d;
        e.has_kept = true;
    }
}
