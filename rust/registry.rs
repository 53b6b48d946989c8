//! Topic names to dense ids, and one atomic word per id that the beat path updates lock-free.
//!
//! Names live in one append-only arena (a `String` plus a span per id) indexed by a
//! `hashbrown::HashTable<u32>`: about 14 bytes of index per topic besides the name itself, where a
//! `HashMap<String, u32>` would cost ~40. The words live in fixed-size chunks that never move, so
//! a beat by id reads them without any lock while new topics are being added.
//!
//! Ids are never reused: a removed topic's id is retired and its name stays in the arena, so an
//! event still queued for it names the right topic. (Reuse would need generation-tagged handles;
//! the cap on tracked topics is the bound on growth.)

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use parking_lot::RwLock;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A dense topic id, `0..registry.len()`.
pub type TopicId = u32;

const CHUNK_BITS: u32 = 16;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const MAX_CHUNKS: usize = 1 << 12;
/// The most topics one registry can hold over its life (2^28, about 268 million).
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
    /// The registry holds [`MAX_TOPICS`] ids, or its name arena is full.
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

struct Names {
    arena: String,
    /// (start, len) of each id's name in `arena`.
    spans: Vec<(u32, u32)>,
    index: HashTable<TopicId>,
}

impl Names {
    fn name(&self, id: TopicId) -> &str {
        let (start, len) = self.spans[id as usize];
        &self.arena[start as usize..(start + len) as usize]
    }
}

/// Read access to every topic's name, from [`Registry::with_names`].
pub struct NameView<'a>(&'a Names);

impl NameView<'_> {
    /// The name of `id` (also of a removed id). Panics on an id never handed out.
    pub fn get(&self, id: TopicId) -> &str {
        self.0.name(id)
    }
}

/// The name index and the per-topic atomic words.
pub struct Registry {
    names: RwLock<Names>,
    hasher: FixedState,
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// Ids handed out so far; an id below this has its word chunk allocated.
    len: AtomicU32,
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
                spans: Vec::new(),
                index: HashTable::new(),
            }),
            hasher: FixedState::default(),
            chunks: (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
        }
    }

    /// Reserve room for `additional` more names of about `avg_name_len` bytes, so bulk
    /// registration does not rehash or reallocate on the way.
    pub fn reserve(&self, additional: usize, avg_name_len: usize) {
        let mut names = self.names.write();
        let hasher = &self.hasher;
        let Names {
            arena,
            spans,
            index,
        } = &mut *names;
        index.reserve(additional, |&id| {
            let (s, l) = spans[id as usize];
            hasher.hash_one(&arena[s as usize..(s + l) as usize])
        });
        spans.reserve(additional);
        arena.reserve(additional.saturating_mul(avg_name_len));
    }

    /// Ids handed out so far (removed ones included).
    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }

    /// Whether no id was ever handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of `name`, if it is registered.
    #[inline]
    pub fn lookup(&self, name: &str) -> Option<TopicId> {
        let names = self.names.read();
        self.find(&names, name)
    }

    /// Run `f` with a lookup function under one read lock: the batch form of [`lookup`].
    ///
    /// [`lookup`]: Registry::lookup
    pub fn with_lookup<R>(&self, f: impl FnOnce(&dyn Fn(&str) -> Option<TopicId>) -> R) -> R {
        let names = self.names.read();
        f(&|name| self.find(&names, name))
    }

    #[inline]
    fn find(&self, names: &Names, name: &str) -> Option<TopicId> {
        let hash = self.hasher.hash_one(name);
        names
            .index
            .find(hash, |&id| names.name(id) == name)
            .copied()
    }

    /// Register `name` with its word set to `initial`, or return the id it already has.
    /// Returns `(id, created)`.
    pub fn intern(&self, name: &str, initial: u64) -> Result<(TopicId, bool), RegisterError> {
        if name.is_empty() {
            return Err(RegisterError::Empty);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(RegisterError::TooLong(name.len()));
        }
        let hash = self.hasher.hash_one(name);
        let mut guard = self.names.write();
        if let Some(&id) = guard.index.find(hash, |&id| guard.name(id) == name) {
            return Ok((id, false));
        }
        let id = self.len.load(Ordering::Relaxed) as usize;
        let start = guard.arena.len();
        if id >= MAX_TOPICS || start + name.len() > u32::MAX as usize {
            return Err(RegisterError::Full);
        }
        // Make the word exist and hold its initial value before the id is published.
        self.chunk_or_alloc(id)[id & (CHUNK_LEN - 1)].store(initial, Ordering::Release);
        let names = &mut *guard;
        names.arena.push_str(name);
        names.spans.push((start as u32, name.len() as u32));
        let id = id as TopicId;
        let (arena, spans, hasher) = (&names.arena, &names.spans, &self.hasher);
        names.index.insert_unique(hash, id, |&other| {
            let (s, l) = spans[other as usize];
            hasher.hash_one(&arena[s as usize..(s + l) as usize])
        });
        self.len.store(id + 1, Ordering::Release);
        Ok((id, true))
    }

    /// Remove `name` from the index so lookups no longer find it; its id is retired.
    pub fn unindex(&self, id: TopicId) {
        let mut guard = self.names.write();
        let names = &mut *guard;
        if (id as usize) >= names.spans.len() {
            return;
        }
        let hash = self.hasher.hash_one(names.name(id));
        if let Ok(entry) = names.index.find_entry(hash, |&other| other == id) {
            entry.remove();
        }
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

    /// Bytes held by the name index, the arena and the allocated word chunks.
    pub fn heap_bytes(&self) -> usize {
        let names = self.names.read();
        let chunks = self.chunks.iter().filter(|c| c.get().is_some()).count();
        names.arena.capacity()
            + names.spans.capacity() * std::mem::size_of::<(u32, u32)>()
            + names.index.capacity() * (std::mem::size_of::<TopicId>() + 1)
            + chunks * CHUNK_LEN * std::mem::size_of::<AtomicU64>()
            + self.chunks.len() * std::mem::size_of::<OnceLock<Box<[AtomicU64]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_is_idempotent_and_ids_are_dense() {
        let r = Registry::new();
        assert_eq!(r.intern("a", 7), Ok((0, true)));
        assert_eq!(r.intern("b", 8), Ok((1, true)));
        assert_eq!(r.intern("a", 9), Ok((0, false)));
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
        assert_eq!(r.intern("", 0), Err(RegisterError::Empty));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let err = r.intern(&long, 0).unwrap_err();
        assert_eq!(err, RegisterError::TooLong(MAX_NAME_LEN + 1));
        assert!(err.to_string().contains("65537 bytes"), "{err}");
        assert!(r.is_empty());
    }

    #[test]
    fn unindexed_names_stay_resolvable_but_are_not_found() {
        let r = Registry::new();
        r.intern("gone", 0).unwrap();
        r.intern("kept", 0).unwrap();
        r.unindex(0);
        assert_eq!(r.lookup("gone"), None);
        assert_eq!(r.lookup("kept"), Some(1));
        assert_eq!(r.name(0), "gone");
        // A new registration of the same name gets a fresh id.
        assert_eq!(r.intern("gone", 0), Ok((2, true)));
    }

    #[test]
    fn many_names_cross_chunk_boundaries() {
        let r = Registry::new();
        let n = CHUNK_LEN + 10;
        r.reserve(n, 8);
        for i in 0..n {
            assert_eq!(
                r.intern(&format!("t{i}"), i as u64).unwrap(),
                (i as u32, true)
            );
        }
        for i in [0, CHUNK_LEN - 1, CHUNK_LEN, n - 1] {
            assert_eq!(r.lookup(&format!("t{i}")), Some(i as u32));
            assert_eq!(r.word(i as u32).unwrap().load(Ordering::Relaxed), i as u64);
        }
        r.with_lookup(|find| assert_eq!(find("t5"), Some(5)));
        r.with_names(|names| assert_eq!(names.get(7), "t7"));
    }

    #[test]
    fn concurrent_readers_see_published_words() {
        let r = std::sync::Arc::new(Registry::new());
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    r.intern(&format!("n{i}"), i + 1).unwrap();
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
}
