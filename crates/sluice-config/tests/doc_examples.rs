//! The configs the documentation shows are configs sluice accepts: README's full
//! list of settings (every key with its default) and OPERATIONS' mirror example.
//! A key renamed or removed, or an example that drifts from the code, fails here
//! rather than in an operator's `sluice check`.

use sluice_config::Config;
use std::path::PathBuf;

/// The ```toml block that follows `after` in the document `doc` (from the root).
fn block(doc: &str, after: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(doc);
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text
        .find(after)
        .unwrap_or_else(|| panic!("{doc}: {after:?} not found"));
    let open = at + text[at..].find("```toml\n").expect("a toml block") + "```toml\n".len();
    let close = open + text[open..].find("```").expect("the block's end");
    text[open..close].to_string()
}

#[test]
fn readmes_settings_and_the_operations_example_parse() {
    let readme = block("README.md", "A config file (TOML");
    let c = Config::parse(&readme, "README.md").unwrap_or_else(|e| panic!("{}", e.0));
    // The list shows the defaults: spot-check keys added lately.
    assert_eq!(c.condition.cap_address, 0);
    assert!(c.files.error_pages.is_empty());
    assert_eq!(c.log.level, "info");
    let ops = block("docs/OPERATIONS.md", "## 2. A complete example");
    Config::parse(&ops, "OPERATIONS.md").unwrap_or_else(|e| panic!("{}", e.0));
}
