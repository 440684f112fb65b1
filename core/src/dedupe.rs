//! Near-duplicate detection (A12): the same fact recorded many times, in
//! different words, should take one or two places in a bundle, not twenty.
//!
//! Two texts are near-duplicates when their sets of content words overlap
//! enough (Jaccard similarity at least the policy's threshold). Words are
//! lowercased, split on anything but letters and digits, stripped of common
//! function words and of a plural or verb suffix, so "The budget is 65K
//! tokens" and "our token budget: 65k" share {budget, 65k, token}.
//!
//! Each chunk's word set is computed once, at projection, and stored
//! (`chunks.word_hashes`, [`encode`]): a bundle compares hundreds of
//! candidates without reading or re-splitting their texts.

use std::sync::LazyLock;

const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had",
    "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "just", "me", "more", "most", "my", "no", "nor", "not", "now", "of",
    "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she",
    "should", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very",
    "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will",
    "with", "would", "you", "your", "yours", "still", "again", "remember", "reminder", "note",
    "also", "please", "ok", "okay",
];

/// The content words of a text, as a sorted set of word hashes (comparing
/// hashes keeps dedupe cheap when hundreds of candidates are compared).
/// Runs for every evidence candidate, so it allocates only the result.
pub fn words(text: &str) -> Vec<u64> {
    let mut lowered = String::new();
    let mut words = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        lowered.clear();
        if word.is_ascii() {
            lowered.push_str(word);
            lowered.make_ascii_lowercase();
        } else {
            lowered.extend(word.chars().flat_map(char::to_lowercase));
        }
        if is_stopword(&lowered) {
            continue;
        }
        words.push(fnv1a(stem(&lowered).as_bytes()));
    }
    words.sort_unstable();
    words.dedup();
    words
}

/// Stop words, sorted for binary search (run for every word of every
/// chunk at projection).
static STOPWORDS_SORTED: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut sorted = STOPWORDS.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted
});

/// The longest stop word: longer words skip the lookup.
const STOPWORD_MAX_LEN: usize = 8;

/// A word too common to tell texts apart (a short English list).
pub fn is_stopword(word: &str) -> bool {
    word.len() <= STOPWORD_MAX_LEN && STOPWORDS_SORTED.binary_search(&word).is_ok()
}

/// FNV-1a: fast, and the same in every process (SipHash is seeded).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Strips one common English suffix from words long enough to keep a stem.
pub fn stem(word: &str) -> &str {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(stem) = word.strip_suffix(suffix)
            && stem.chars().count() >= 3
            && !stem.ends_with('s')
        {
            return stem;
        }
    }
    word
}

/// A word set as stored: 8 bytes per hash, little-endian, in order.
pub fn encode(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A stored word set back (trailing bytes short of a hash are ignored).
pub fn decode(bytes: &[u8]) -> Vec<u64> {
    let mut words = Vec::with_capacity(bytes.len() / 8);
    decode_into(bytes, &mut words);
    words
}

/// [`decode`], appending to `words`.
pub fn decode_into(bytes: &[u8], words: &mut Vec<u64>) {
    words.extend(
        bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
    );
}

/// |a ∩ b| / |a ∪ b| of two sorted sets; two empty sets are not similar.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 {
        0.0
    } else {
        shared as f64 / union as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rephrasings_of_one_fact_are_similar_and_other_facts_are_not() {
        let facts = [
            "The token budget is 65K.",
            "Reminder: our token budget is 65K tokens.",
            "token budget = 65k",
            "Remember, the budget is 65K tokens",
        ];
        for a in facts {
            for b in facts {
                assert!(jaccard(&words(a), &words(b)) >= 0.6, "{a:?} vs {b:?}");
            }
        }
        let other = words("The deploy budget is 3 engineers for the 65K migration");
        assert!(jaccard(&words(facts[0]), &other) < 0.6);
        assert_eq!(jaccard(&words("the and"), &words("of")), 0.0);
    }

    #[test]
    fn stored_word_sets_read_back_the_same() {
        let set = words("Export job 4411 timed out after 30 s on page 7");
        assert!(!set.is_empty());
        assert_eq!(decode(&encode(&set)), set);
        assert_eq!(decode(&[]), Vec::<u64>::new());
    }

    #[test]
    fn every_stop_word_is_found_and_no_longer_than_the_bound() {
        for word in STOPWORDS {
            assert!(word.len() <= STOPWORD_MAX_LEN, "{word}");
            assert!(is_stopword(word), "{word}");
        }
        assert!(!is_stopword("budget"));
        assert_eq!(words("The BUDGET"), words("budget"));
        assert_eq!(words("Ünïcode ÉTÉ"), words("ünïcode été"));
    }

    #[test]
    fn stemming_is_light() {
        assert_eq!(stem("tokens"), "token");
        assert_eq!(stem("deployed"), "deploy");
        assert_eq!(stem("running"), "runn");
        assert_eq!(stem("bus"), "bus");
        assert_eq!(stem("class"), "class");
    }
}
