//! A git tree edited in memory: what a layer's task changed, laid over the tree of its
//! starting commit, so that the new tree is written one changed folder at a time and
//! never through an index of the whole repository (whose copy per task would cost
//! writes in proportion to the repository's file count, not to the change).

use std::collections::{BTreeMap, BTreeSet};

/// A path inside the repository, as git's raw bytes, without a leading or trailing `/`.
pub type RepoPath = Vec<u8>;

/// One entry of a git tree: its mode as git writes it (`100644`, `100755`, `120000`,
/// `160000`, `40000`) and its object id in hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: String,
    pub oid: String,
}

impl Entry {
    pub fn is_tree(&self) -> bool {
        self.mode == "40000"
    }

    /// A submodule's commit: what lies under it is another repository's.
    pub fn is_gitlink(&self) -> bool {
        self.mode == "160000"
    }

    /// The object type `git mktree` expects beside the mode.
    fn kind(&self) -> &'static str {
        match self.mode.as_str() {
            "40000" => "tree",
            "160000" => "commit",
            _ => "blob",
        }
    }
}

/// A tree's entries by name.
pub type Listing = BTreeMap<Vec<u8>, Entry>;

/// Parses a tree object as `git cat-file --batch` prints it: `<mode> <name>\0` and the
/// raw id, over and over. The id's length is the repository's hash length in bytes.
pub fn parse_tree(raw: &[u8], id_len: usize) -> Option<Listing> {
    let mut out = Listing::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ')?;
        let nul = rest.iter().position(|b| *b == 0)?;
        if nul < space || rest.len() < nul + 1 + id_len {
            return None;
        }
        let mode = std::str::from_utf8(&rest[..space]).ok()?.to_string();
        let name = rest[space + 1..nul].to_vec();
        let oid: String = rest[nul + 1..nul + 1 + id_len]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.insert(name, Entry { mode, oid });
        rest = &rest[nul + 1 + id_len..];
    }
    Some(out)
}

/// A listing as `git mktree -z` reads it (entries NUL-terminated; the caller ends the
/// tree with one more NUL in `--batch` mode).
pub fn mktree_input(listing: &Listing) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, e) in listing {
        out.extend_from_slice(format!("{} {} {}\t", e.mode, e.kind(), e.oid).as_bytes());
        out.extend_from_slice(name);
        out.push(0);
    }
    out
}

/// What a path became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Nothing is there now (deleted, or never tracked).
    Gone,
    /// A file or link with this entry.
    Leaf(Entry),
    /// A folder holding edits. `cleared`: what the starting tree held under it is
    /// hidden (an overlay folder that replaced a lower one): it starts empty.
    Dir {
        cleared: bool,
        children: BTreeMap<Vec<u8>, Node>,
    },
}

impl Default for Node {
    fn default() -> Node {
        Node::Dir {
            cleared: false,
            children: BTreeMap::new(),
        }
    }
}

fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty())
}

impl Node {
    /// The folder node at `dirs` below this one, made where missing. A file on the way
    /// means nothing can be below it, and so does a deletion unless `put` (something is
    /// there now, so the folder is too): None then.
    fn folder<'a>(&mut self, dirs: impl Iterator<Item = &'a [u8]>, put: bool) -> Option<&mut Node> {
        let mut at = self;
        for c in dirs {
            let Node::Dir { children, .. } = at else {
                return None;
            };
            let next = children.entry(c.to_vec()).or_default();
            match next {
                Node::Dir { .. } => {}
                Node::Gone if put => *next = Node::default(),
                Node::Gone | Node::Leaf(_) => return None,
            }
            at = next;
        }
        Some(at)
    }

    fn split(path: &[u8]) -> Option<(Vec<&[u8]>, &[u8])> {
        let mut parts: Vec<&[u8]> = components(path).collect();
        let last = parts.pop()?;
        Some((parts, last))
    }

    /// A file or link now at `path`. Whatever was recorded there before goes.
    pub fn put(&mut self, path: &[u8], entry: Entry) {
        let Some((dirs, name)) = Self::split(path) else {
            return;
        };
        if let Some(Node::Dir { children, .. }) = self.folder(dirs.into_iter(), true) {
            children.insert(name.to_vec(), Node::Leaf(entry));
        }
    }

    /// Nothing at `path` now: nor anything below it. A file recorded there (or on the
    /// way) stays: it is what is there now.
    pub fn remove(&mut self, path: &[u8]) {
        let Some((dirs, name)) = Self::split(path) else {
            return;
        };
        if let Some(Node::Dir { children, .. }) = self.folder(dirs.into_iter(), false) {
            let slot = children.entry(name.to_vec()).or_insert(Node::Gone);
            if matches!(slot, Node::Dir { .. }) {
                *slot = Node::Gone;
            }
        }
    }

    /// The folder at `path` replaced what the starting tree held there.
    pub fn clear(&mut self, path: &[u8]) {
        let Some((dirs, name)) = Self::split(path) else {
            return;
        };
        let Some(Node::Dir { children, .. }) = self.folder(dirs.into_iter(), false) else {
            return;
        };
        match children.entry(name.to_vec()).or_default() {
            Node::Dir { cleared, .. } => *cleared = true,
            Node::Gone | Node::Leaf(_) => {}
        }
    }
}

/// The folders that hold `paths`: their parents, and theirs, up to the root (the empty
/// path).
pub fn folders_of<'a>(paths: impl Iterator<Item = &'a RepoPath>) -> BTreeSet<RepoPath> {
    let mut out = BTreeSet::new();
    out.insert(Vec::new());
    for p in paths {
        for (i, b) in p.iter().enumerate() {
            if *b == b'/' {
                out.insert(p[..i].to_vec());
            }
        }
    }
    out
}

/// `dir/name`, or `name` at the root.
pub fn join(dir: &[u8], name: &[u8]) -> RepoPath {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// The starting tree, as much of it as the edits need: the listing of each folder that
/// holds an edit (None where the starting tree has no folder there).
pub type Base = BTreeMap<RepoPath, Option<Listing>>;

/// Where new trees go: returns the id of the tree written from a listing.
pub trait TreeWriter {
    type Error;
    fn write(&mut self, listing: &Listing) -> Result<String, Self::Error>;
}

/// The root tree `node` makes of `root` (the starting tree); the empty tree when
/// nothing is left.
pub fn build_root<W: TreeWriter>(
    node: &Node,
    root: &Entry,
    base: &Base,
    out: &mut W,
) -> Result<Entry, W::Error> {
    match build(node, b"", Some(root), false, base, out)? {
        Some(e) => Ok(e),
        None => Ok(Entry {
            mode: "40000".into(),
            oid: out.write(&Listing::new())?,
        }),
    }
}

/// The entry `node` (at `path`) makes of `base_entry` (what the starting tree has
/// there); None when nothing is left. Folders whose listing did not change keep their
/// id; an emptied folder disappears, as git stores no empty trees. Children are written
/// before their parent. `hidden`: an overlay folder above replaced the starting one.
fn build<W: TreeWriter>(
    node: &Node,
    path: &[u8],
    base_entry: Option<&Entry>,
    hidden: bool,
    base: &Base,
    out: &mut W,
) -> Result<Option<Entry>, W::Error> {
    match node {
        Node::Gone => Ok(None),
        Node::Leaf(e) => Ok(Some(e.clone())),
        Node::Dir { cleared, children } => {
            let hidden = hidden || *cleared;
            let start = match (hidden, base_entry) {
                (false, Some(e)) if e.is_tree() => base.get(path).cloned().flatten(),
                _ => None,
            };
            let mut listing = start.clone().unwrap_or_default();
            for (name, child) in children {
                let below = if hidden {
                    None
                } else {
                    listing.get(name).cloned()
                };
                let sub = join(path, name);
                match build(child, &sub, below.as_ref(), hidden, base, out)? {
                    Some(e) => listing.insert(name.clone(), e),
                    None => listing.remove(name),
                };
            }
            if listing.is_empty() {
                return Ok(None);
            }
            if let (Some(before), Some(e)) = (&start, base_entry) {
                if *before == listing {
                    return Ok(Some(e.clone()));
                }
            }
            Ok(Some(Entry {
                mode: "40000".into(),
                oid: out.write(&listing)?,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(oid: &str) -> Entry {
        Entry {
            mode: "100644".into(),
            oid: oid.into(),
        }
    }

    fn tree(oid: &str) -> Entry {
        Entry {
            mode: "40000".into(),
            oid: oid.into(),
        }
    }

    /// Writes nothing: names each tree by its listing, so tests can read it back.
    struct Names(Vec<String>);
    impl TreeWriter for Names {
        type Error = ();
        fn write(&mut self, listing: &Listing) -> Result<String, ()> {
            let s: Vec<String> = listing
                .iter()
                .map(|(n, e)| format!("{}={}", String::from_utf8_lossy(n), e.oid))
                .collect();
            let name = format!("[{}]", s.join(","));
            self.0.push(name.clone());
            Ok(name)
        }
    }

    fn listing(items: &[(&str, Entry)]) -> Option<Listing> {
        Some(
            items
                .iter()
                .map(|(n, e)| (n.as_bytes().to_vec(), e.clone()))
                .collect(),
        )
    }

    fn base() -> Base {
        let mut b = Base::new();
        b.insert(
            b"".to_vec(),
            listing(&[("a", tree("A")), ("f", leaf("F")), ("y", tree("Y"))]),
        );
        b.insert(
            b"a".to_vec(),
            listing(&[("x", leaf("X")), ("z", leaf("Z"))]),
        );
        b.insert(b"y".to_vec(), listing(&[("k", leaf("K"))]));
        b.insert(b"f".to_vec(), None);
        b
    }

    fn root(node: &Node) -> (Entry, Vec<String>) {
        let mut w = Names(Vec::new());
        let e = build_root(node, &tree("ROOT"), &base(), &mut w).unwrap();
        (e, w.0)
    }

    #[test]
    fn untouched_folders_keep_their_ids_and_changed_ones_are_written_bottom_up() {
        let mut n = Node::default();
        n.put(b"a/x", leaf("X2"));
        let (e, written) = root(&n);
        assert_eq!(written, vec!["[x=X2,z=Z]", "[a=[x=X2,z=Z],f=F,y=Y]"]);
        assert_eq!(e.oid, "[a=[x=X2,z=Z],f=F,y=Y]");
        // The same content again: nothing written, the root's id kept.
        let mut same = Node::default();
        same.put(b"a/x", leaf("X"));
        assert_eq!(root(&same), (tree("ROOT"), vec![]));
    }

    #[test]
    fn deletions_empty_folders_away_and_files_and_folders_swap() {
        let mut n = Node::default();
        n.remove(b"y/k");
        n.remove(b"nothing/there");
        // A file became a folder, and a folder a file.
        n.clear(b"f");
        n.put(b"f/inner", leaf("I"));
        n.put(b"a", leaf("NOWFILE"));
        // Saved from an earlier look: under what is now a file, so moot.
        n.remove(b"a/x");
        let (e, _) = root(&n);
        assert_eq!(e.oid, "[a=NOWFILE,f=[inner=I]]");
        // A removed folder goes whole, whichever of it and a path below came first.
        for order in [["y/k", "y"], ["y", "y/k"]] {
            let mut n = Node::default();
            n.put(b"f", leaf("F"));
            for p in order {
                n.remove(p.as_bytes());
            }
            assert_eq!(root(&n).0.oid, "[a=A,f=F]", "{order:?}");
        }
    }

    #[test]
    fn a_cleared_folder_starts_empty_down_to_its_subfolders() {
        let mut b = base();
        b.insert(b"".to_vec(), listing(&[("a", tree("A")), ("y", tree("Y"))]));
        b.insert(b"a/sub".to_vec(), listing(&[("old", leaf("O"))]));
        let mut n = Node::default();
        n.clear(b"a");
        n.put(b"a/sub/new", leaf("N"));
        let mut w = Names(Vec::new());
        let e = build_root(&n, &tree("ROOT"), &b, &mut w).unwrap();
        assert_eq!(e.oid, "[a=[sub=[new=N]],y=Y]");
        // Everything gone: the root is the empty tree, still written.
        let mut all = Node::default();
        all.remove(b"a");
        all.remove(b"y");
        all.remove(b"f");
        assert_eq!(root(&all).0.oid, "[]");
    }

    #[test]
    fn the_folders_of_paths_are_their_ancestors() {
        let paths = [b"a/b/c".to_vec(), b"top".to_vec(), b"d/e".to_vec()];
        let f: Vec<RepoPath> = folders_of(paths.iter()).into_iter().collect();
        assert_eq!(
            f,
            vec![b"".to_vec(), b"a".to_vec(), b"a/b".to_vec(), b"d".to_vec()]
        );
    }

    #[test]
    fn raw_trees_parse_and_format_for_mktree() {
        let mut raw = b"100644 f.txt\0".to_vec();
        raw.extend([0xab; 20]);
        raw.extend(b"40000 dir\0");
        raw.extend([0x01; 20]);
        let l = parse_tree(&raw, 20).unwrap();
        assert_eq!(l[b"f.txt".as_slice()].oid, "ab".repeat(20));
        assert!(l[b"dir".as_slice()].is_tree());
        let text = mktree_input(&l);
        assert!(text.starts_with(format!("40000 tree {}\tdir\0", "01".repeat(20)).as_bytes()));
        assert!(parse_tree(&raw[..raw.len() - 1], 20).is_none(), "truncated");
    }
}
