//! Token counts, computed once when a chunk is projected and stored with it.

use std::str::FromStr;

use tiktoken_rs::CoreBPE;

/// The BPE encoding token counts are made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// GPT-4o and later.
    #[default]
    O200kBase,
    /// GPT-4 and GPT-3.5.
    Cl100kBase,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    /// Part of the chunk projector's version: switching encodings replays
    /// the log so every stored count uses one encoding.
    pub(crate) fn version_digit(self) -> i32 {
        match self {
            Self::O200kBase => 0,
            Self::Cl100kBase => 1,
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        match self {
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        }
    }
}

impl FromStr for Encoding {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "o200k_base" => Ok(Self::O200kBase),
            "cl100k_base" => Ok(Self::Cl100kBase),
            other => Err(format!(
                "unknown token encoding {other:?} (known: o200k_base, cl100k_base)"
            )),
        }
    }
}

/// Counts tokens with one encoding. Loading an encoding takes a moment, so
/// it is loaded once per process and shared.
#[derive(Clone, Copy)]
pub struct TokenCounter {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl TokenCounter {
    pub fn new(encoding: Encoding) -> Self {
        Self {
            encoding,
            bpe: encoding.bpe(),
        }
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    pub fn count(&self, text: &str) -> usize {
        self.bpe.count_ordinary(text)
    }
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCounter")
            .field("encoding", &self.encoding)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings() {
        let counter = TokenCounter::new(Encoding::Cl100kBase);
        assert_eq!(counter.count("hello world"), 2);
        assert_eq!(counter.count(""), 0);
        let o200k = TokenCounter::new(Encoding::O200kBase);
        assert!(o200k.count("The quick brown fox jumps over the lazy dog.") >= 9);
    }

    #[test]
    fn parses_encoding_names() {
        assert_eq!("cl100k_base".parse(), Ok(Encoding::Cl100kBase));
        assert!("gpt2".parse::<Encoding>().is_err());
    }
}
