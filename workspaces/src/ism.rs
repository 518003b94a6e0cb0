//! The insert-sort-merge template (paper 001 §4–§5): components are inserted
//! into a small *accumulation array* (deduplicated there by the reduction
//! where the policy can), which, when full, is sorted and merged into a
//! sorted, duplicate-free *all array*; at the end the all array is
//! compressed into an output level format.
//!
//! A component is a coordinate tuple of any order with a value. Its *label*
//! is the tuple's row-major rank in the tensor's shape (a finite integer
//! with a known range), which every policy sorts and hashes by.

use spindle_formats::{FormatError, Result};

/// The labels of a tensor's coordinates: row-major ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labels {
    shape: Vec<usize>,
    /// The number of labels (the product of the shape).
    range: u64,
}

impl Labels {
    /// Labels of `shape`; an error when its product passes `u64`.
    pub fn new(shape: &[usize]) -> Result<Labels> {
        let range = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).ok_or_else(|| {
            FormatError::invalid("workspace", format!("shape {shape:?} has more than 2^64 coordinates"))
        })?;
        Ok(Labels { shape: shape.to_vec(), range })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn range(&self) -> u64 {
        self.range
    }

    /// The label of `coords` (each inside the shape).
    pub fn label(&self, coords: &[usize]) -> u64 {
        debug_assert_eq!(coords.len(), self.shape.len());
        coords.iter().zip(&self.shape).fold(0u64, |l, (&c, &d)| l * d as u64 + c as u64)
    }

    /// The coordinates of `label`.
    pub fn coords(&self, mut label: u64, out: &mut [usize]) {
        for (o, &d) in out.iter_mut().zip(&self.shape).rev() {
            *o = (label % d as u64) as usize;
            label /= d as u64;
        }
    }

    /// The first coordinate of `label` (the bucket of the Bucket policy).
    pub fn leading(&self, label: u64) -> usize {
        (label / (self.range / self.shape[0].max(1) as u64).max(1)) as usize
    }
}

/// What an accumulation array does: take components, and when full (or at
/// the end) hand them over sorted by label with each label once.
pub trait Accumulation {
    /// Adds `value` at `label`, summing with an earlier insert of the same
    /// label where the policy deduplicates on insertion.
    fn insert(&mut self, label: u64, value: f64);
    /// Whether the next insert needs a merge first.
    fn is_full(&self) -> bool;
    /// Components held.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends the components to `out` sorted by label, equal labels summed,
    /// and empties the array.
    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>);
    /// Grows (or keeps) the capacity for the next round.
    fn set_capacity(&mut self, capacity: usize);
    /// The components it takes before it is full (`usize::MAX`: never).
    fn capacity(&self) -> usize;
    /// Bytes the array holds now (its buffers' capacities).
    fn bytes(&self) -> usize;
}

/// Paper 001's Bucket policy: a bucket per first coordinate (`L = I`,
/// `h = i`) holding accumulation ids, a flag per bucket, deduplication on
/// insertion by a scan of the bucket; sorted by visiting the flagged
/// buckets in order and sorting each (short) bucket.
#[derive(Debug)]
pub struct Bucket {
    labels: Labels,
    components: Vec<(u64, f64)>,
    buckets: Vec<Vec<u32>>,
    flagged: Vec<u32>,
    flags: Vec<bool>,
    capacity: usize,
}

impl Bucket {
    pub fn new(labels: Labels, capacity: usize) -> Bucket {
        let n = labels.shape.first().copied().unwrap_or(1).max(1);
        Bucket {
            labels,
            components: Vec::new(),
            buckets: vec![Vec::new(); n],
            flagged: Vec::new(),
            flags: vec![false; n],
            capacity: capacity.max(1),
        }
    }
}

impl Accumulation for Bucket {
    fn insert(&mut self, label: u64, value: f64) {
        let b = self.labels.leading(label);
        if !self.flags[b] {
            self.flags[b] = true;
            self.flagged.push(b as u32);
        }
        if let Some(&id) = self.buckets[b].iter().find(|&&id| self.components[id as usize].0 == label) {
            self.components[id as usize].1 += value;
            return;
        }
        self.buckets[b].push(self.components.len() as u32);
        self.components.push((label, value));
    }

    fn is_full(&self) -> bool {
        self.components.len() >= self.capacity
    }

    fn len(&self) -> usize {
        self.components.len()
    }

    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>) {
        self.flagged.sort_unstable();
        for &b in &self.flagged {
            let bucket = &mut self.buckets[b as usize];
            let components = &self.components;
            bucket.sort_unstable_by_key(|&id| components[id as usize].0);
            out.extend(bucket.iter().map(|&id| components[id as usize]));
            bucket.clear();
            self.flags[b as usize] = false;
        }
        self.flagged.clear();
        self.components.clear();
    }

    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn bytes(&self) -> usize {
        self.components.capacity() * 16
            + self.buckets.iter().map(|b| b.capacity() * 4 + 24).sum::<usize>()
            + self.flagged.capacity() * 4
            + self.flags.len()
    }
}

/// Paper 001's Hash policy: `L = 2^⌈log2 n⌉` slots (`L` below the label
/// range), `h = label mod L`, linear probing, deduplication on insertion;
/// sorted by sorting the occupied slots' labels.
#[derive(Debug)]
pub struct Hash {
    slots: Vec<(u64, f64)>,
    used: Vec<u32>,
    mask: u64,
    capacity: usize,
}

/// An empty hash slot (no label reaches it: labels are below the range).
const EMPTY: u64 = u64::MAX;

impl Hash {
    /// A table of `2^⌈log2 expected⌉` slots, at most half of them used per
    /// round.
    pub fn new(expected: usize) -> Hash {
        let slots = expected.max(2).next_power_of_two();
        Hash {
            slots: vec![(EMPTY, 0.0); slots],
            used: Vec::new(),
            mask: slots as u64 - 1,
            capacity: slots / 2,
        }
    }
}

impl Accumulation for Hash {
    fn insert(&mut self, label: u64, value: f64) {
        let mut s = (label & self.mask) as usize;
        loop {
            let slot = &mut self.slots[s];
            if slot.0 == label {
                slot.1 += value;
                return;
            }
            if slot.0 == EMPTY {
                *slot = (label, value);
                self.used.push(s as u32);
                return;
            }
            s = (s + 1) & self.mask as usize;
        }
    }

    fn is_full(&self) -> bool {
        self.used.len() >= self.capacity
    }

    fn len(&self) -> usize {
        self.used.len()
    }

    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>) {
        let slots = &mut self.slots;
        self.used.sort_unstable_by_key(|&s| slots[s as usize].0);
        for &s in &self.used {
            out.push(slots[s as usize]);
            slots[s as usize] = (EMPTY, 0.0);
        }
        self.used.clear();
    }

    fn set_capacity(&mut self, capacity: usize) {
        // The table keeps a free half so probes stay short.
        let slots = (capacity.max(1) * 2).next_power_of_two();
        if slots > self.slots.len() {
            self.slots = vec![(EMPTY, 0.0); slots];
            self.mask = slots as u64 - 1;
        }
        self.capacity = self.slots.len() / 2;
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn bytes(&self) -> usize {
        self.slots.capacity() * 16 + self.used.capacity() * 4
    }
}

/// Paper 001's Coord policy: append every insert (no deduplication), then a
/// sort by label, equal labels summed as they meet. With `indexing`, the
/// sort moves 4-byte accumulation ids, not the components (accumulation
/// indexing, §5.1).
#[derive(Debug)]
pub struct Coord {
    components: Vec<(u64, f64)>,
    ids: Vec<u32>,
    capacity: usize,
    indexing: bool,
}

impl Coord {
    pub fn new(capacity: usize, indexing: bool) -> Coord {
        Coord { components: Vec::new(), ids: Vec::new(), capacity: capacity.max(1), indexing }
    }
}

/// Appends sorted components to `out`, summing equal labels.
fn push_summed(out: &mut Vec<(u64, f64)>, sorted: impl Iterator<Item = (u64, f64)>) {
    let start = out.len();
    for (label, value) in sorted {
        let fresh = out.len() == start;
        match out.last_mut() {
            Some(last) if !fresh && last.0 == label => last.1 += value,
            _ => out.push((label, value)),
        }
    }
}

impl Accumulation for Coord {
    fn insert(&mut self, label: u64, value: f64) {
        self.components.push((label, value));
    }

    fn is_full(&self) -> bool {
        self.components.len() >= self.capacity
    }

    fn len(&self) -> usize {
        self.components.len()
    }

    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>) {
        if self.indexing {
            let components = &self.components;
            self.ids.clear();
            self.ids.extend(0..components.len() as u32);
            self.ids.sort_unstable_by_key(|&id| components[id as usize].0);
            push_summed(out, self.ids.iter().map(|&id| components[id as usize]));
        } else {
            self.components.sort_unstable_by_key(|c| c.0);
            push_summed(out, self.components.iter().copied());
        }
        self.components.clear();
    }

    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn bytes(&self) -> usize {
        self.components.capacity() * 16 + self.ids.capacity() * 4
    }
}

/// The dense workspace: a value and a flag per label of the whole range, a
/// list of the flagged labels; sorted by reading the flags in order when
/// many are set, else by sorting the list. Never full.
#[derive(Debug)]
pub struct Dense {
    values: Vec<f64>,
    flags: Vec<bool>,
    list: Vec<u64>,
}

impl Dense {
    /// One slot per label: `labels.range()` must fit in memory.
    pub fn new(labels: &Labels) -> Result<Dense> {
        let n = usize::try_from(labels.range()).ok().filter(|&n| n <= 1 << 28).ok_or_else(|| {
            FormatError::invalid("dense workspace", format!("{} slots is too many", labels.range()))
        })?;
        Ok(Dense { values: vec![0.0; n], flags: vec![false; n], list: Vec::new() })
    }
}

impl Accumulation for Dense {
    fn insert(&mut self, label: u64, value: f64) {
        let l = label as usize;
        if !self.flags[l] {
            self.flags[l] = true;
            self.list.push(label);
        }
        self.values[l] += value;
    }

    fn is_full(&self) -> bool {
        false
    }

    fn len(&self) -> usize {
        self.list.len()
    }

    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>) {
        if self.list.len() * 16 > self.flags.len() {
            for (l, flag) in self.flags.iter_mut().enumerate() {
                if *flag {
                    *flag = false;
                    out.push((l as u64, std::mem::take(&mut self.values[l])));
                }
            }
        } else {
            self.list.sort_unstable();
            for &l in &self.list {
                self.flags[l as usize] = false;
                out.push((l, std::mem::take(&mut self.values[l as usize])));
            }
        }
        self.list.clear();
    }

    fn set_capacity(&mut self, _: usize) {}

    fn capacity(&self) -> usize {
        usize::MAX
    }

    fn bytes(&self) -> usize {
        self.values.capacity() * 8 + self.flags.capacity() + self.list.capacity() * 8
    }
}

/// The Map extreme: a sorted map takes every insert in order (accumulation
/// size one, no separate all array to merge into); never full.
#[derive(Debug, Default)]
pub struct Map {
    map: std::collections::BTreeMap<u64, f64>,
}

impl Accumulation for Map {
    fn insert(&mut self, label: u64, value: f64) {
        *self.map.entry(label).or_insert(0.0) += value;
    }

    fn is_full(&self) -> bool {
        false
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn drain_sorted(&mut self, out: &mut Vec<(u64, f64)>) {
        out.extend(std::mem::take(&mut self.map));
    }

    fn set_capacity(&mut self, _: usize) {}

    fn capacity(&self) -> usize {
        usize::MAX
    }

    fn bytes(&self) -> usize {
        // A B-tree node per ~11 entries of 16 bytes, plus their links.
        self.map.len() * 24
    }
}

impl Coord {
    /// The Vector extreme: append everything, one sort at the end.
    pub fn vector(indexing: bool) -> Coord {
        Coord::new(usize::MAX, indexing)
    }
}

/// The accumulation array's next capacity after a merge: paper 001's
/// three-stage piecewise-linear growth (quick while small, slower as it
/// grows, bounded), instead of doubling.
pub fn next_capacity(capacity: usize) -> usize {
    match capacity {
        0..4096 => capacity * 4,
        4096..262_144 => capacity * 2,
        _ => capacity.saturating_add(capacity / 4).min(1 << 24),
    }
}

/// The ISM template's switches (each can be turned off for an ablation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Grow the accumulation array after each merge ([`next_capacity`]).
    pub reallocation: bool,
    /// Merge into a second all array and swap, rather than into a
    /// temporary copied back.
    pub double_buffering: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { reallocation: true, double_buffering: true }
    }
}

/// An insert-sort-merge workspace over a policy `P`.
///
/// ```
/// use spindle_workspaces::ism::{Coord, Ism, Labels, Options};
///
/// let labels = Labels::new(&[3, 4])?;
/// let mut ws = Ism::new(labels, Coord::new(2, true), Options::default());
/// ws.insert(&[2, 1], 1.0);
/// ws.insert(&[0, 3], 2.0);
/// ws.insert(&[2, 1], 0.5); // merged with the first
/// let all = ws.finish();
/// assert_eq!(all, [(3, 2.0), (9, 1.5)]); // labels 0*4+3 and 2*4+1
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
#[derive(Debug)]
pub struct Ism<P> {
    labels: Labels,
    policy: P,
    options: Options,
    all: Vec<(u64, f64)>,
    spare: Vec<(u64, f64)>,
    batch: Vec<(u64, f64)>,
    merges: usize,
    peak_bytes: usize,
}

impl<P: Accumulation> Ism<P> {
    pub fn new(labels: Labels, policy: P, options: Options) -> Ism<P> {
        Ism {
            labels,
            policy,
            options,
            all: Vec::new(),
            spare: Vec::new(),
            batch: Vec::new(),
            merges: 0,
            peak_bytes: 0,
        }
    }

    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Inserts `value` at `coords` (summed with earlier inserts there).
    pub fn insert(&mut self, coords: &[usize], value: f64) {
        let label = self.labels.label(coords);
        self.insert_label(label, value);
    }

    pub fn insert_label(&mut self, label: u64, value: f64) {
        if self.policy.is_full() {
            self.merge();
        }
        self.policy.insert(label, value);
    }

    /// Sorts the accumulation array and merges it into the all array.
    fn merge(&mut self) {
        let full = self.policy.is_full();
        self.batch.clear();
        self.policy.drain_sorted(&mut self.batch);
        self.spare.clear();
        self.spare.reserve(self.all.len() + self.batch.len());
        merge_sorted(&self.all, &self.batch, &mut self.spare);
        if self.options.double_buffering {
            std::mem::swap(&mut self.all, &mut self.spare);
        } else {
            // One all array: the merge went to a temporary, copied back.
            let merged = std::mem::take(&mut self.spare);
            self.all.clear();
            self.all.extend_from_slice(&merged);
        }
        self.merges += 1;
        if self.options.reallocation && full {
            // An array that filled grows, from the capacity it filled (a
            // batch of repeated labels is shorter than it); a last, partial
            // one keeps its size.
            let capacity = next_capacity(self.policy.capacity());
            self.policy.set_capacity(capacity);
        }
        self.peak_bytes = self.peak_bytes.max(self.bytes());
    }

    /// Bytes held now: the accumulation array, the all arrays, the batch.
    pub fn bytes(&self) -> usize {
        self.policy.bytes() + (self.all.capacity() + self.spare.capacity() + self.batch.capacity()) * 16
    }

    /// The most bytes held at any merge.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes.max(self.bytes())
    }

    /// Merges done so far.
    pub fn merges(&self) -> usize {
        self.merges
    }

    /// The components, sorted by label, each label once.
    pub fn finish(mut self) -> Vec<(u64, f64)> {
        if !self.policy.is_empty() {
            self.merge();
        }
        self.all
    }
}

/// Merges two label-sorted, duplicate-free lists into `out`, summing equal
/// labels.
pub fn merge_sorted(a: &[(u64, f64)], b: &[(u64, f64)], out: &mut Vec<(u64, f64)>) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push((a[i].0, a[i].1 + b[j].1));
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// The workspace's components compressed into `spec` (CSR, CSC, DCSR,
/// DCSC, COO, CSF of any order): the output level format they drain into.
pub fn compress(
    labels: &Labels,
    all: &[(u64, f64)],
    spec: &spindle_formats::FormatSpec,
) -> Result<spindle_formats::SparseTensor<f64, i64>> {
    let order = labels.shape().len();
    let mut crd = vec![Vec::with_capacity(all.len()); order];
    let mut at = vec![0usize; order];
    for &(label, _) in all {
        labels.coords(label, &mut at);
        for (d, &c) in at.iter().enumerate() {
            crd[d].push(c as i64);
        }
    }
    let coo = spindle_formats::Coo::new(labels.shape().to_vec(), crd, all.iter().map(|c| c.1).collect())?;
    spindle_formats::SparseTensor::from_coo(&coo, spec)
}

/// The ISM template with its sort and merge pipelined on a second thread
/// (paper 001 §5.3): when the accumulation array fills, it goes to a worker
/// that sorts it and merges it into the all array, while inserts go on into
/// a second array; the two arrays trade places.
///
/// ```
/// use spindle_workspaces::ism::{Hash, Labels, Pipelined};
///
/// let labels = Labels::new(&[100, 100])?;
/// let mut ws = Pipelined::new(labels.clone(), Hash::new(8), Hash::new(8));
/// for k in 0..1000usize {
///     ws.insert(&[k % 100, (k * 7) % 100], 1.0);
/// }
/// let all = ws.finish();
/// assert_eq!(all.iter().map(|c| c.1).sum::<f64>(), 1000.0);
/// assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
#[derive(Debug)]
pub struct Pipelined<P: Accumulation + Send + 'static> {
    labels: Labels,
    current: P,
    /// An emptied array back from the worker, when one is.
    spare: Option<P>,
    to_worker: Option<std::sync::mpsc::Sender<P>>,
    from_worker: std::sync::mpsc::Receiver<P>,
    worker: Option<std::thread::JoinHandle<Vec<(u64, f64)>>>,
    merges: usize,
}

impl<P: Accumulation + Send + 'static> Pipelined<P> {
    /// Two accumulation arrays of one policy; the all array is
    /// double-buffered and the arrays grow after each merge.
    pub fn new(labels: Labels, first: P, second: P) -> Pipelined<P> {
        let (to_worker, work) = std::sync::mpsc::channel::<P>();
        let (done, from_worker) = std::sync::mpsc::channel::<P>();
        let worker = std::thread::spawn(move || {
            let (mut all, mut spare, mut batch) = (Vec::new(), Vec::new(), Vec::new());
            for mut array in work {
                batch.clear();
                array.drain_sorted(&mut batch);
                spare.clear();
                merge_sorted(&all, &batch, &mut spare);
                std::mem::swap(&mut all, &mut spare);
                array.set_capacity(next_capacity(array.capacity()));
                // The inserting side may have finished: then nobody waits.
                let _ = done.send(array);
            }
            all
        });
        Pipelined {
            labels,
            current: first,
            spare: Some(second),
            to_worker: Some(to_worker),
            from_worker,
            worker: Some(worker),
            merges: 0,
        }
    }

    pub fn insert(&mut self, coords: &[usize], value: f64) {
        let label = self.labels.label(coords);
        if self.current.is_full() {
            let next = match self.spare.take() {
                Some(array) => array,
                // Both arrays are in use: wait for the worker's.
                None => self.from_worker.recv().expect("the merge worker lives while inserts go on"),
            };
            let full = std::mem::replace(&mut self.current, next);
            self.send(full);
            if let Ok(back) = self.from_worker.try_recv() {
                self.spare = Some(back);
            }
        }
        self.current.insert(label, value);
    }

    fn send(&mut self, array: P) {
        self.merges += 1;
        let sender = self.to_worker.as_ref().expect("open until finish");
        sender.send(array).expect("the merge worker lives while inserts go on");
    }

    /// Merges handed to the worker so far.
    pub fn merges(&self) -> usize {
        self.merges
    }

    /// The components, sorted by label, each label once.
    pub fn finish(mut self) -> Vec<(u64, f64)> {
        if !self.current.is_empty() {
            let last = std::mem::replace(
                &mut self.current,
                self.spare.take().unwrap_or_else(|| {
                    self.from_worker.recv().expect("the merge worker lives while inserts go on")
                }),
            );
            self.send(last);
        }
        self.to_worker = None;
        self.worker.take().expect("joined once").join().expect("the merge worker does not panic")
    }
}

/// A parallel ISM: `parts` pieces of work are handed out to `threads`
/// threads, each inserting (through `produce(part, insert)`) into its own
/// workspace of `policy()`; the threads' sorted results are then merged in
/// pairs, in parallel, into one.
///
/// ```
/// use spindle_workspaces::ism::{Coord, Labels, Options, parallel};
///
/// let labels = Labels::new(&[50, 40])?;
/// // Part p fills rows p and p + 10 of a 50 x 40 matrix (rows 0..20).
/// let all = parallel(&labels, 2, || Coord::new(64, true), Options::default(), 10, |part, insert| {
///     for j in 0..40 {
///         insert(&[part, j], 1.0);
///         insert(&[part + 10, j], 2.0);
///     }
/// });
/// assert_eq!(all.len(), 20 * 40);
/// assert_eq!(all[0], (0, 1.0));
/// assert_eq!(all[all.len() - 1], (19 * 40 + 39, 2.0));
/// # Ok::<(), spindle_formats::FormatError>(())
/// ```
pub fn parallel<P, F>(
    labels: &Labels,
    threads: usize,
    policy: impl Fn() -> P + Sync,
    options: Options,
    parts: usize,
    produce: F,
) -> Vec<(u64, f64)>
where
    P: Accumulation,
    F: Fn(usize, &mut dyn FnMut(&[usize], f64)) + Sync,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let threads = threads.clamp(1, parts.max(1));
    let mut results: Vec<Vec<(u64, f64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut ws = Ism::new(labels.clone(), policy(), options);
                    loop {
                        let part = next.fetch_add(1, Ordering::Relaxed);
                        if part >= parts {
                            break;
                        }
                        produce(part, &mut |coords, value| ws.insert(coords, value));
                    }
                    ws.finish()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("an ISM thread does not panic")).collect()
    });
    // Merge in pairs, each round's pairs on threads of their own.
    while results.len() > 1 {
        let mut pairs = Vec::new();
        while results.len() >= 2 {
            let b = results.pop().expect("two left");
            let a = results.pop().expect("two left");
            pairs.push((a, b));
        }
        let leftover = results.pop();
        results = std::thread::scope(|s| {
            let handles: Vec<_> = pairs
                .iter()
                .map(|(a, b)| {
                    s.spawn(move || {
                        let mut out = Vec::with_capacity(a.len() + b.len());
                        merge_sorted(a, b, &mut out);
                        out
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a merge does not panic")).collect()
        });
        results.extend(leftover);
    }
    results.pop().unwrap_or_default()
}
