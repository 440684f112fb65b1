//! A weight-free embedder: content words and their character trigrams,
//! hashed into a fixed number of signed buckets (the hashing trick), then
//! L2-normalised. Texts that share words or word pieces ("paint",
//! "painting", "painted") point the same way; it knows no synonyms. Useful
//! where no model files can be had, and in tests.

use crate::{EmbedError, Embedder, normalise};
use memd_core::dedupe::{fnv1a, is_stopword, stem};

pub struct HashedEmbedder;

impl HashedEmbedder {
    pub const NAME: &'static str = "hashed";
    pub const VERSION: i32 = 1;
    pub const DIMENSIONS: usize = 256;
    /// A whole word counts this much more than one of its trigrams.
    const WORD_WEIGHT: f32 = 2.0;

    /// The vector of one text.
    pub fn vector(text: &str) -> Vec<f32> {
        let mut vector = vec![0.0_f32; Self::DIMENSIONS];
        let mut add = |bytes: &[u8], weight: f32| {
            let hash = fnv1a(bytes);
            let bucket = (hash % Self::DIMENSIONS as u64) as usize;
            let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
            vector[bucket] += sign * weight;
        };
        let mut lowered = String::new();
        let mut padded = Vec::new();
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            lowered.clear();
            lowered.extend(word.chars().flat_map(char::to_lowercase));
            if is_stopword(&lowered) {
                continue;
            }
            add(stem(&lowered).as_bytes(), Self::WORD_WEIGHT);
            // Trigrams of " word ", by characters: word starts and ends
            // count, and non-ASCII words are not cut inside a character.
            padded.clear();
            padded.push(' ');
            padded.extend(lowered.chars());
            padded.push(' ');
            let mut buffer = [0_u8; 12];
            for window in padded.windows(3) {
                let mut length = 0;
                for c in window {
                    length += c.encode_utf8(&mut buffer[length..]).len();
                }
                // Trigrams live apart from words: a 3-letter word and
                // its own trigram are different features.
                buffer[length] = 0xff;
                add(&buffer[..=length], 1.0);
            }
        }
        normalise(&mut vector);
        vector
    }
}

impl Embedder for HashedEmbedder {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn dimensions(&self) -> usize {
        Self::DIMENSIONS
    }

    fn version(&self) -> i32 {
        Self::VERSION
    }

    /// Words and trigrams hashed into 256 signed buckets: texts that share
    /// none still meet in colliding buckets, at about ±1/√256 apiece.
    fn unrelated_similarity(&self) -> f64 {
        0.1
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|text| Self::vector(text)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot;

    #[test]
    fn shared_words_and_word_pieces_point_the_same_way() {
        let painting = HashedEmbedder::vector("Melanie is painting a sunset");
        let painted = HashedEmbedder::vector("what did Melanie paint?");
        let unrelated = HashedEmbedder::vector("the deploy pipeline failed on arm64");
        assert!(
            (dot(&painting, &painting) - 1.0).abs() < 1e-5,
            "unit length"
        );
        assert!(dot(&painting, &painted) > 0.3);
        assert!(dot(&painting, &painted) > dot(&painting, &unrelated) + 0.2);
    }

    #[test]
    fn the_same_text_gives_the_same_vector_in_any_batch() {
        let alone = HashedEmbedder.embed(&["café au lait"]).unwrap();
        let batched = HashedEmbedder.embed(&["x", "café au lait"]).unwrap();
        assert_eq!(alone[0], batched[1]);
        assert_eq!(alone[0].len(), HashedEmbedder::DIMENSIONS);
        let empty = HashedEmbedder::vector("");
        assert!(
            empty.iter().all(|x| *x == 0.0),
            "nothing to say: zero vector"
        );
    }
}
