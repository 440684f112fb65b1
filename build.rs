// `sqlx::migrate!()` (src/db.rs) embeds the migrations' text in the binary,
// but cargo does not know the macro reads `migrations/`: without this, a
// build after editing only a migration keeps the old text.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
