//! A monitor group's shard function, as `heartwire.transport.shards.shard_of` computes it:
//! `jump_hash(crc32(topic as UTF-8), shards)` (docs/groups-design.md §2). The intake of a shard
//! queue uses it to refuse a beat whose topic belongs to another shard (`wrong_shard`), so the
//! result must be the same as Python's, name for name.

/// The most shards a group may have (`heartwire.transport.shards.MAX_SHARDS`).
pub const MAX_SHARDS: u32 = 4096;

/// CRC-32/ISO-HDLC's table (reflected polynomial 0xEDB88320): `zlib.crc32`'s.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32/ISO-HDLC of `bytes` (`zlib.crc32`, `java.util.zip.CRC32`).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c = CRC_TABLE[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// The bucket in `[0, buckets)` of `key`: the jump consistent hash of Lamping and Veach
/// (arXiv:1406.2294), in the paper's double arithmetic (the divisor is at most 2**31: exact).
/// `buckets` >= 1.
pub fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

/// The shard of `topic` in a group of `shards` shards (>= 1).
pub fn shard_of(topic: &str, shards: u32) -> u32 {
    jump_hash(u64::from(crc32(topic.as_bytes())), shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926); // the check value of CRC-32/ISO-HDLC
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn jump_hash_matches_the_published_vectors() {
        // tests/publisher/test_shards.py's JUMP_VECTORS (C, Go, Python and Elixir ports').
        for (key, buckets, want) in [
            (1u64, 1u32, 0u32),
            (42, 57, 43),
            (0xDEAD_10CC, 1, 0),
            (0xDEAD_10CC, 666, 361),
            (256, 1024, 520),
            (0, 1, 0),
            (3, 1, 0),
            (0, 2, 0),
            (4, 2, 1),
            (7, 2, 0),
            (1, 128, 55),
            (129, 128, 120),
            (u64::MAX, 128, 92),
            (128, 100_000_000, 38_172_097),
            (128, 2_147_483_648, 1_644_467_860),
            ((-42i64) as u64, 57, 8),
        ] {
            assert_eq!(jump_hash(key, buckets), want, "jump_hash({key}, {buckets})");
        }
    }

    #[test]
    fn shard_of_is_pinned_as_in_python() {
        assert_eq!(crc32(b"svc.db"), 0xF38B_5673);
        let got: Vec<u32> = ["svc.db", "a", "payments.eu-west:1.api"]
            .iter()
            .map(|t| shard_of(t, 16))
            .collect();
        assert_eq!(got, [0, 14, 7]);
    }

    #[test]
    fn every_topic_lands_in_range_and_growing_moves_few() {
        let names: Vec<String> = (0..10_000).map(|i| format!("svc.{i}")).collect();
        let mut moved = 0;
        for name in &names {
            let a = shard_of(name, 16);
            let b = shard_of(name, 17);
            assert!(a < 16 && b < 17);
            if a != b {
                assert_eq!(b, 16, "{name}: a topic that moves goes to the new shard");
                moved += 1;
            }
        }
        // About 1/17 of them (588): jump hashing's promise.
        assert!((400..800).contains(&moved), "{moved} moved");
    }
}
