//! The write side: the only code that inserts into `events` and `artifacts`.
//! It appends and never changes anything (the database refuses it anyway).

mod append;
mod group_commit;

pub use append::{AppendError, Appended, NOTIFY_CHANNEL, append};
pub use group_commit::{AppendPools, Appender};
