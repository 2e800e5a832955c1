//! Copies keep a sparse file's holes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::{read_csv, Case};
use crate::workspaces::Mode;

/// A sparse file of a plain folder stays sparse in the pristine checkout and in a copy:
/// its holes are not written out as zeros.
#[test]
fn copies_keep_a_sparse_files_holes() {
    let case = Case::new();
    crate::common::calc_fixture(&case, "sparse");
    let big = std::fs::File::create(case.path("sparse/big.img")).unwrap();
    big.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&big, b"data in the middle", 32 << 20).unwrap();
    drop(big);
    case.write(
        "copy.yaml",
        "name: s\nproviders:\n  s: { protocol: anthropic, simulator: true }\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  repo: sparse\n  workspaces: copy\n  keep_workspaces: always\ntasks:\n  - id: t\n    prompt: p\n    sim: { turns: [ { content: [ { tool_use: { name: bash, input: { command: 'wc -c big.img' } } } ] }, { content: [ { text: done } ] } ] }\n",
    );
    let mode = Mode::new("copy", "copy");
    mode.run(&case);
    let dir = mode.run_dir(&case);
    let row = read_csv(&dir.join("results.csv")).remove(0);
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let kept = Path::new(&row["workspace"]).join("big.img");
    let pristine = dir.join("pristine/0/tree/big.img");
    for file in [&pristine, &kept] {
        let meta = std::fs::metadata(file).unwrap();
        assert_eq!(meta.len(), 64 << 20, "{}", file.display());
        let allocated = meta.blocks() * 512;
        assert!(
            allocated < 1 << 20,
            "{}: {allocated} bytes allocated for 18 bytes of data",
            file.display()
        );
        let bytes = std::fs::read(file).unwrap();
        assert_eq!(&bytes[32 << 20..(32 << 20) + 18], b"data in the middle");
        assert!(bytes[..32 << 20].iter().all(|b| *b == 0));
    }
}
