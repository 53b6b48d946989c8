//! Topic names to dense ids, and one atomic word per id that the beat path updates lock-free.
//!
//! Names live in one arena, each after a 7-byte header holding its id and length, found by an
//! open-addressing [`NameIndex`] of arena offsets (8 bytes a slot, at most 3/4 full) and by id
//! through a start offset per id: about 22 bytes per topic besides the name itself, where a
//! `HashMap<String, u32>` would cost ~40. A lookup reads one line of index, then the name with
//! its id: two random reads where an index of ids would need four (control bytes, bucket, the
//! id's span, the name). The words live in fixed-size chunks that never move, so a beat by id
//! reads them without any lock while new topics are being added.
//!
//! Ids are reused: the detector hands a removed topic's id to a new topic once no queued event
//! can still name the old one (see `Detector::remove`). Each id carries a generation, bumped on
//! every reuse; a [`Handle`] is the id with its generation, so a handle kept from the removed
//! topic no longer resolves ([`Registry::resolve`]) and can never reach the new one. The old
//! name stays readable until the id is reused; the arena is compacted once names that no id
//! uses make up most of it, so memory follows the topics held, not the topics ever seen.

mod name_index;

use foldhash::fast::FixedState;
use name_index::NameIndex;
use parking_lot::RwLock;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A dense topic id, `0..registry.len()`; reused after a topic is removed.
pub type TopicId = u32;

/// A topic id with its generation: `generation << 32 | id`. The generation of an id is bumped
/// each time the id is reused, so a handle names one topic for good. An id whose generation is
/// 0 (never reused) is its own handle.
pub type Handle = u64;

/// Generations wrap at 2^31 (so that a handle fits a signed 64-bit integer).
pub const GEN_MASK: u32 = (1 << 31) - 1;

/// The id of `handle` and its generation.
#[inline]
pub fn split_handle(handle: Handle) -> (TopicId, u32) {
    (handle as TopicId, (handle >> 32) as u32)
}

/// The handle of `id` at generation `gen`.
#[inline]
pub fn make_handle(id: TopicId, gen: u32) -> Handle {
    (u64::from(gen) << 32) | u64::from(id)
}

const CHUNK_BITS: u32 = 16;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const MAX_CHUNKS: usize = 1 << 12;
/// The most topics one registry can hold at a time (2^28, about 268 million).
pub const MAX_TOPICS: usize = CHUNK_LEN * MAX_CHUNKS;
/// The longest topic name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// Why a name could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    TooLong(usize),
    /// The registry holds [`MAX_TOPICS`] topics, or its name arena is full.
    Full,
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::Empty => write!(f, "topic name must not be empty"),
            RegisterError::TooLong(n) => write!(
                f,
                "topic name is {n} bytes long, more than the {MAX_NAME_LEN} allowed"
            ),
            RegisterError::Full => write!(f, "no room for another topic: the registry is full"),
        }
    }
}

/// Bytes before each name in the arena: its id (28 bits) and its length - 1 (17 bits), seven
/// bits a byte, so the header is ASCII and the arena stays a `String` (names are sliced out of
/// it as `&str` without any check of their UTF-8 beyond the char boundaries).
const HEADER: usize = 7;
const _: () = assert!(MAX_TOPICS <= 1 << 28 && MAX_NAME_LEN <= 1 << 21);

fn header(id: TopicId, len: usize) -> [u8; HEADER] {
    let (id, l) = (id as usize, len - 1);
    let b = |v: usize, shift: u32| ((v >> shift) & 0x7f) as u8;
    [
        b(id, 0),
        b(id, 7),
        b(id, 14),
        b(id, 21),
        b(l, 0),
        b(l, 7),
        b(l, 14),
    ]
}

struct Names {
    /// Every name ever given an id (until compacted away), each after its [`HEADER`].
    arena: String,
    /// Where each id's entry (header, then name) starts in `arena`.
    starts: Vec<u32>,
    /// The entries of the names indexed now, by hash.
    index: NameIndex,
    /// Bytes of `arena` in entries no id holds any more (names of reused ids).
    garbage: usize,
}

impl Names {
    /// The header's 7-bit groups, little end first.
    #[inline]
    fn field(&self, at: usize, n: usize) -> usize {
        self.arena.as_bytes()[at..at + n]
            .iter()
            .rev()
            .fold(0, |v, &b| (v << 7) | usize::from(b))
    }

    /// The id and the name of the entry at `offset`.
    #[inline]
    fn entry(&self, offset: u32) -> (TopicId, &str) {
        let at = offset as usize;
        let len = self.field(at + 4, 3) + 1;
        (
            self.field(at, 4) as TopicId,
            &self.arena[at + HEADER..at + HEADER + len],
        )
    }

    fn name(&self, id: TopicId) -> &str {
        self.entry(self.starts[id as usize]).1
    }

    /// Bytes of the entry at `offset`.
    fn entry_len(&self, offset: u32) -> usize {
        HEADER + self.field(offset as usize + 4, 3) + 1
    }
}

/// The part of a name's hash the index keeps (see [`NameIndex`]).
#[inline]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// Read access to every topic's name, from [`Registry::with_names`].
pub struct NameView<'a>(&'a Names);

impl NameView<'_> {
    /// The name of `id` (also of a removed id). Panics on an id never handed out.
    pub fn get(&self, id: TopicId) -> &str {
        self.0.name(id)
    }
}

/// Lookups under one read lock of the name index, from [`Registry::with_lookup`].
pub struct Lookup<'a> {
    registry: &'a Registry,
    names: &'a Names,
}

/// The most names [`Lookup::find_many`] reads ahead for at once.
pub const LOOKUP_CHUNK: usize = 64;

impl Lookup<'_> {
    /// The id of `name`, if it is registered.
    #[inline]
    pub fn find(&self, name: &str) -> Option<TopicId> {
        self.registry.find(self.names, name)
    }

    /// The ids of `names` into `out` (`out[i]` for `names[i]`), [`LOOKUP_CHUNK`] at a time.
    ///
    /// Each name's hash and first index slot, then (where the slot's tag matches) the start of
    /// the entry it points at are read for the whole chunk before any name is compared: those
    /// reads do not depend on each other, so their cache misses overlap, where name after name
    /// each lookup would wait for the one before (two misses apiece with a million topics).
    pub fn find_many(&self, names: &[&str], out: &mut [Option<TopicId>]) {
        let hasher = &self.registry.hasher;
        let index = &self.names.index;
        let arena = self.names.arena.as_bytes();
        for (names, out) in names.chunks(LOOKUP_CHUNK).zip(out.chunks_mut(LOOKUP_CHUNK)) {
            let mut hashes = [0u64; LOOKUP_CHUNK];
            let mut ahead = [0u8; LOOKUP_CHUNK];
            for (i, name) in names.iter().enumerate() {
                hashes[i] = hasher.hash_one(name);
            }
            for (a, &h) in ahead.iter_mut().zip(&hashes[..names.len()]) {
                let first = index.home_slot(tag(h));
                if let Some(offset) = NameIndex::offset_if(first, tag(h)) {
                    *a = arena.get(offset as usize).copied().unwrap_or(0);
                }
            }
            // Keep the reads ahead: their values feed nothing else.
            std::hint::black_box(&ahead);
            for ((name, &h), id) in names.iter().zip(&hashes).zip(out.iter_mut()) {
                *id = Registry::find_hashed(self.names, h, name);
            }
        }
    }

    /// [`find_many`](Lookup::find_many) giving handles: each id with its generation now,
    /// read under this lookup's lock, which an id's reuse needs, so a handle names the topic
    /// its name had (a beat by it after the lock is released and the id reused counts as
    /// unknown).
    pub fn handles_many(&self, names: &[&str], out: &mut [Option<Handle>]) {
        let mut ids = [None; LOOKUP_CHUNK];
        for (names, out) in names.chunks(LOOKUP_CHUNK).zip(out.chunks_mut(LOOKUP_CHUNK)) {
            let ids = &mut ids[..names.len()];
            self.find_many(names, ids);
            for (h, id) in out.iter_mut().zip(ids.iter()) {
                *h = id.map(|id| make_handle(id, self.registry.gen(id)));
            }
        }
    }
}

/// The name index and the per-topic atomic words.
pub struct Registry {
    names: RwLock<Names>,
    hasher: FixedState,
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// Generations, per chunk of ids; a chunk none of whose ids was ever reused has none (all
    /// 0), so beats by handle in it read no more memory than beats by id.
    gens: Box<[OnceLock<Box<[AtomicU32]>>]>,
    /// Ids handed out so far (the high-water mark); an id below this has its chunk allocated.
    len: AtomicU32,
    /// Names indexed now (topics not removed).
    live: AtomicU32,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            names: RwLock::new(Names {
                arena: String::new(),
                starts: Vec::new(),
                index: NameIndex::new(),
                garbage: 0,
            }),
            hasher: FixedState::default(),
            chunks: (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect(),
            gens: (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
            live: AtomicU32::new(0),
        }
    }

    /// Reserve room for `additional` more names of about `avg_name_len` bytes, so bulk
    /// registration does not rehash or reallocate on the way.
    pub fn reserve(&self, additional: usize, avg_name_len: usize) {
        let mut names = self.names.write();
        names.index.reserve(additional);
        names.starts.reserve(additional);
        names
            .arena
            .reserve(additional.saturating_mul(avg_name_len + HEADER));
    }

    /// Ids handed out so far (the high-water mark: removed ones included, reused ones once).
    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }

    /// Whether no id was ever handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Topics registered and not removed.
    #[inline]
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire) as usize
    }

    /// The id of `name`, if it is registered.
    #[inline]
    pub fn lookup(&self, name: &str) -> Option<TopicId> {
        let names = self.names.read();
        self.find(&names, name)
    }

    /// The handle of `name`, if it is registered: its id and generation read under one read
    /// lock, which an id's reuse (under the write lock) cannot interleave with.
    #[inline]
    pub fn lookup_handle(&self, name: &str) -> Option<Handle> {
        let names = self.names.read();
        let id = self.find(&names, name)?;
        self.handle(id)
    }

    /// Run `f` with lookups under one read lock: the batch form of [`lookup`].
    ///
    /// [`lookup`]: Registry::lookup
    pub fn with_lookup<R>(&self, f: impl FnOnce(&Lookup<'_>) -> R) -> R {
        let names = self.names.read();
        f(&Lookup {
            registry: self,
            names: &names,
        })
    }

    #[inline]
    fn find(&self, names: &Names, name: &str) -> Option<TopicId> {
        Self::find_hashed(names, self.hasher.hash_one(name), name)
    }

    #[inline]
    fn find_hashed(names: &Names, hash: u64, name: &str) -> Option<TopicId> {
        let mut id = 0;
        names.index.find(tag(hash), |offset| {
            let (at, held) = names.entry(offset);
            id = at;
            held == name
        })?;
        Some(id)
    }

    /// Register `name`, or return the id it already has. Returns `(id, created)`. A new name
    /// takes the id `reuse` if given (a removed id no queued event names any more: its
    /// generation is bumped, its old name dropped), else the next new id; its word is set to
    /// `initial(generation)`.
    pub fn intern(
        &self,
        name: &str,
        reuse: Option<TopicId>,
        initial: impl FnOnce(u32) -> u64,
    ) -> Result<(TopicId, bool), RegisterError> {
        if name.is_empty() {
            return Err(RegisterError::Empty);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(RegisterError::TooLong(name.len()));
        }
        let hash = self.hasher.hash_one(name);
        let mut guard = self.names.write();
        if let Some(id) = Self::find_hashed(&guard, hash, name) {
            return Ok((id, false));
        }
        let high = self.len.load(Ordering::Relaxed) as usize;
        let id = reuse.map_or(high, |r| r as usize);
        if reuse.is_none() && high >= MAX_TOPICS {
            return Err(RegisterError::Full);
        }
        // Offsets are u32, and the index keeps offset + 1: the last entry must start below
        // u32::MAX.
        let entry = HEADER + name.len();
        if guard.arena.len() + entry >= u32::MAX as usize {
            Self::compact(&mut guard);
            if guard.arena.len() + entry >= u32::MAX as usize {
                return Err(RegisterError::Full);
            }
        }
        // Make the word exist and hold its generation and initial value before the id is
        // published (a new id) or its handle can resolve (a reused one).
        let word = &self.chunk_or_alloc(id)[id & (CHUNK_LEN - 1)];
        let gen = if reuse.is_some() {
            let gens = self.gens[id >> CHUNK_BITS]
                .get_or_init(|| (0..CHUNK_LEN).map(|_| AtomicU32::new(0)).collect());
            let slot = &gens[id & (CHUNK_LEN - 1)];
            let gen = (slot.load(Ordering::Relaxed) + 1) & GEN_MASK;
            slot.store(gen, Ordering::Release);
            gen
        } else {
            0
        };
        word.store(initial(gen), Ordering::Release);
        let names = &mut *guard;
        let id = id as TopicId;
        let start = names.arena.len() as u32;
        // The header is ASCII: the arena stays valid UTF-8.
        names.arena.extend(header(id, name.len()).map(char::from));
        names.arena.push_str(name);
        if reuse.is_some() {
            names.garbage += names.entry_len(names.starts[id as usize]);
            names.starts[id as usize] = start;
        } else {
            names.starts.push(start);
        }
        names.index.insert(tag(hash), start);
        if reuse.is_none() {
            self.len.store(id + 1, Ordering::Release);
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        if names.garbage > 4096 && names.garbage * 2 > names.arena.len() {
            Self::compact(names);
        }
        Ok((id, true))
    }

    /// Rewrite the arena with only the entries some id holds, and point the index at their
    /// new places (each indexed entry is its id's current one).
    fn compact(names: &mut Names) {
        let mut arena = String::with_capacity(names.arena.len() - names.garbage);
        let mut starts = Vec::with_capacity(names.starts.len());
        for &s in &names.starts {
            starts.push(arena.len() as u32);
            arena.push_str(&names.arena[s as usize..s as usize + names.entry_len(s)]);
        }
        let mut index = std::mem::replace(&mut names.index, NameIndex::new());
        index.remap(|offset| starts[names.entry(offset).0 as usize]);
        names.index = index;
        names.arena = arena;
        names.starts = starts;
        names.garbage = 0;
    }

    /// Remove `name` from the index so lookups no longer find it. The id keeps its name (for
    /// events still queued) until it is reused.
    pub fn unindex(&self, id: TopicId) {
        let mut guard = self.names.write();
        let names = &mut *guard;
        let Some(&start) = names.starts.get(id as usize) else {
            return;
        };
        let hash = self.hasher.hash_one(names.name(id));
        if names.index.remove(tag(hash), start) {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The handle of `id` now (its current generation), or None for an id not handed out.
    #[inline]
    pub fn handle(&self, id: TopicId) -> Option<Handle> {
        self.word(id)?;
        Some(make_handle(id, self.gen(id)))
    }

    /// The current generation of an id handed out.
    #[inline]
    pub fn gen(&self, id: TopicId) -> u32 {
        match self.gens[(id >> CHUNK_BITS) as usize].get() {
            Some(gens) => gens[id as usize & (CHUNK_LEN - 1)].load(Ordering::Acquire),
            None => 0,
        }
    }

    /// The id `handle` names, if its generation is the id's current one (lock-free; the id
    /// may still be a removed topic's, whose word says so).
    #[inline]
    pub fn resolve(&self, handle: Handle) -> Option<TopicId> {
        let (id, gen) = split_handle(handle);
        self.word(id)?;
        (self.gen(id) == gen).then_some(id)
    }

    /// The name of `id` (also of a removed id). Panics on an id never handed out.
    pub fn name(&self, id: TopicId) -> String {
        self.names.read().name(id).to_owned()
    }

    /// Run `f` with every name readable under one read lock.
    pub fn with_names<R>(&self, f: impl FnOnce(&NameView<'_>) -> R) -> R {
        let names = self.names.read();
        f(&NameView(&names))
    }

    /// The atomic word of `id`, or None for an id not handed out.
    #[inline]
    pub fn word(&self, id: TopicId) -> Option<&AtomicU64> {
        if (id as usize) >= self.len() {
            return None;
        }
        let chunk = self.chunks[(id >> CHUNK_BITS) as usize].get()?;
        Some(&chunk[id as usize & (CHUNK_LEN - 1)])
    }

    fn chunk_or_alloc(&self, id: usize) -> &[AtomicU64] {
        self.chunks[id >> CHUNK_BITS]
            .get_or_init(|| (0..CHUNK_LEN).map(|_| AtomicU64::new(0)).collect())
    }

    /// Bytes held by the name index, the arena and the allocated word and generation chunks.
    pub fn heap_bytes(&self) -> usize {
        let names = self.names.read();
        let chunks = self.chunks.iter().filter(|c| c.get().is_some()).count();
        let gens = self.gens.iter().filter(|c| c.get().is_some()).count();
        names.arena.capacity()
            + names.starts.capacity() * std::mem::size_of::<u32>()
            + names.index.heap_bytes()
            + chunks * CHUNK_LEN * std::mem::size_of::<AtomicU64>()
            + gens * CHUNK_LEN * std::mem::size_of::<AtomicU32>()
            + self.chunks.len() * std::mem::size_of::<OnceLock<Box<[AtomicU64]>>>()
            + self.gens.len() * std::mem::size_of::<OnceLock<Box<[AtomicU32]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_is_idempotent_and_ids_are_dense() {
        let r = Registry::new();
        assert_eq!(r.intern("a", None, |_| 7), Ok((0, true)));
        assert_eq!(r.intern("b", None, |_| 8), Ok((1, true)));
        assert_eq!(r.intern("a", None, |_| 9), Ok((0, false)));
        assert_eq!(r.len(), 2);
        assert_eq!(r.word(0).unwrap().load(Ordering::Relaxed), 7);
        assert_eq!(r.word(1).unwrap().load(Ordering::Relaxed), 8);
        assert!(r.word(2).is_none());
        assert_eq!(r.lookup("b"), Some(1));
        assert_eq!(r.lookup("c"), None);
        assert_eq!(r.name(1), "b");
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        let r = Registry::new();
        assert_eq!(r.intern("", None, |_| 0), Err(RegisterError::Empty));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let err = r.intern(&long, None, |_| 0).unwrap_err();
        assert_eq!(err, RegisterError::TooLong(MAX_NAME_LEN + 1));
        assert!(err.to_string().contains("65537 bytes"), "{err}");
        assert!(r.is_empty());
    }

    #[test]
    fn unindexed_names_stay_resolvable_but_are_not_found() {
        let r = Registry::new();
        r.intern("gone", None, |_| 0).unwrap();
        r.intern("kept", None, |_| 0).unwrap();
        r.unindex(0);
        assert_eq!(r.lookup("gone"), None);
        assert_eq!(r.lookup("kept"), Some(1));
        assert_eq!(r.name(0), "gone");
        // A new registration of the same name gets a fresh id.
        assert_eq!(r.intern("gone", None, |_| 0), Ok((2, true)));
    }

    #[test]
    fn many_names_cross_chunk_boundaries() {
        let r = Registry::new();
        let n = CHUNK_LEN + 10;
        r.reserve(n, 8);
        for i in 0..n {
            assert_eq!(
                r.intern(&format!("t{i}"), None, |_| i as u64).unwrap(),
                (i as u32, true)
            );
        }
        for i in [0, CHUNK_LEN - 1, CHUNK_LEN, n - 1] {
            assert_eq!(r.lookup(&format!("t{i}")), Some(i as u32));
            assert_eq!(r.word(i as u32).unwrap().load(Ordering::Relaxed), i as u64);
        }
        r.with_lookup(|lookup| {
            assert_eq!(lookup.find("t5"), Some(5));
            // Chunks of every length up to past two LOOKUP_CHUNKs, with misses among them.
            let asked: Vec<String> = (0..2 * LOOKUP_CHUNK + 3)
                .map(|i| format!("{}{i}", if i % 5 == 0 { "x" } else { "t" }))
                .collect();
            let asked: Vec<&str> = asked.iter().map(String::as_str).collect();
            for len in 0..=asked.len() {
                let mut out = vec![Some(u32::MAX); len];
                lookup.find_many(&asked[..len], &mut out);
                let want: Vec<_> = asked[..len].iter().map(|n| lookup.find(n)).collect();
                assert_eq!(out, want, "{len}");
                let mut handles = vec![Some(u64::MAX); len];
                lookup.handles_many(&asked[..len], &mut handles);
                let want: Vec<_> = want.iter().map(|id| id.map(u64::from)).collect();
                assert_eq!(handles, want, "{len}");
            }
        });
        r.with_names(|names| assert_eq!(names.get(7), "t7"));
    }

    #[test]
    fn concurrent_readers_see_published_words() {
        let r = std::sync::Arc::new(Registry::new());
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    r.intern(&format!("n{i}"), None, |_| i + 1).unwrap();
                }
            })
        };
        // Every id below len() must have its initial word visible.
        for _ in 0..200 {
            let n = r.len();
            if n > 0 {
                let w = r.word((n - 1) as u32).unwrap().load(Ordering::Acquire);
                assert_eq!(w, n as u64);
            }
        }
        writer.join().unwrap();
        assert_eq!(r.len(), 20_000);
    }

    #[test]
    fn a_reused_id_gets_a_new_generation_and_stale_handles_stop_resolving() {
        let r = Registry::new();
        let (a, _) = r.intern("a", None, |_| 1).unwrap();
        let old = r.handle(a).unwrap();
        assert_eq!(old, u64::from(a), "generation 0: the id is its own handle");
        r.unindex(a);
        assert_eq!(r.live(), 0);
        assert_eq!(r.name(a), "a", "kept for queued events until reused");
        let (b, created) = r.intern("b", Some(a), |gen| u64::from(gen) << 8).unwrap();
        assert_eq!((b, created), (a, true));
        let new = r.handle(b).unwrap();
        assert_ne!(new, old);
        assert_eq!(r.resolve(old), None);
        assert_eq!(r.resolve(new), Some(b));
        assert_eq!(r.word(b).unwrap().load(Ordering::Relaxed), 1 << 8);
        assert_eq!(
            (r.name(b), r.lookup("b"), r.lookup("a")),
            ("b".into(), Some(b), None)
        );
        assert_eq!((r.len(), r.live()), (1, 1));
    }

    #[test]
    fn churn_through_one_id_keeps_the_arena_small() {
        let r = Registry::new();
        r.intern("steady", None, |_| 0).unwrap();
        let (mut id, _) = r.intern("churn-0", None, |_| 0).unwrap();
        for i in 1..100_000 {
            r.unindex(id);
            id = r.intern(&format!("churn-{i}"), Some(id), |_| 0).unwrap().0;
        }
        assert_eq!((r.len(), r.live()), (2, 2));
        assert!(r.heap_bytes() < 4 * 1024 * 1024, "{}", r.heap_bytes());
        assert!(r.names.read().arena.len() < 64 * 1024);
        assert_eq!(r.lookup("steady"), Some(0));
        assert_eq!(r.name(id), "churn-99999");
        // The index followed each compaction: the current name is found, the old ones not.
        assert_eq!(r.lookup("churn-99999"), Some(id));
        assert_eq!(r.lookup("churn-99998"), None);
        r.unindex(id);
        assert_eq!((r.lookup("churn-99999"), r.live()), (None, 1));
    }

    #[test]
    fn headers_hold_the_largest_id_and_length() {
        let long = "é".repeat(MAX_NAME_LEN / 2); // 2-byte chars: MAX_NAME_LEN bytes
        let mut names = Names {
            arena: String::new(),
            starts: Vec::new(),
            index: NameIndex::new(),
            garbage: 0,
        };
        for (id, name) in [
            (MAX_TOPICS as TopicId - 1, long.as_str()),
            (0, "a"),
            (5, "日本"),
        ] {
            let at = names.arena.len() as u32;
            names.arena.extend(header(id, name.len()).map(char::from));
            names.arena.push_str(name);
            assert_eq!(names.entry(at), (id, name));
            assert_eq!(names.entry_len(at), HEADER + name.len());
        }
    }

    #[test]
    fn non_ascii_names_and_names_sharing_prefixes_are_told_apart() {
        let r = Registry::new();
        let names = ["a", "ab", "abc", "é", "ée", "日本", "日本語", "\u{1f493}"];
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.intern(n, None, |_| 0), Ok((i as TopicId, true)));
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(r.lookup(n), Some(i as TopicId), "{n}");
            assert_eq!(r.name(i as TopicId), *n);
        }
        assert_eq!(r.lookup("日"), None);
        assert_eq!(r.lookup("abcd"), None);
    }
}
