//! The file systems mounted below a directory the server serves, and their
//! devices: which disk a lookup's path is on, known without a lookup.
//!
//! A mirror often keeps one tree per disk under its root (`/srv/mirror/debian`
//! on a disk of its own). A lookup that may wait for the disk is made by the disk
//! threads in its device's lane (`sluice-server`'s `disk/lanes.rs`), so that a
//! slow disk delays its own paths only; without this, a lookup under such a
//! mount point went in the root's lane, and a failing disk below the root could
//! fill the root's share of the queue.
//!
//! Owns: reading `/proc/self/mountinfo` (its mount-point field, octal escapes
//! undone) and one `stat` per mount point below the directory, when a root or
//! alias is opened (at start and on each reload).
//! Must not: be asked per request (a lookup asks the list made here).
//! Costs: one read of mountinfo and a `stat` per mount point below the
//! directory, per directory opened; per lookup's device, a prefix test per
//! mount point below (none on most sites). A mount point reached through a
//! symlink in the tree, not under the directory's own path, is not seen.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Mount points strictly below `dir` (a canonical path) on another device than
/// `dev` (the directory's own): each as its path relative to `dir`, segments
/// without slashes around them (`"debian/pool"`), and its device; longest first.
pub fn below(dir: &Path, dev: u64) -> Vec<(String, u64)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<(String, u64)> = mount_points(&text)
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(dir).ok()?.to_str()?.to_string();
            if rel.is_empty() {
                return None;
            }
            // The device as the files below report it (`st_dev`): for btrfs
            // subvolumes and overlays that is not mountinfo's `major:minor`.
            let d = std::fs::metadata(&p).ok()?.dev();
            (d != dev).then_some((rel, d))
        })
        .collect();
    out.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// The device of `rel` (a normalized path relative to the directory) from
/// `below`'s list: the longest mount point it is at or under, else `dev`.
pub fn device_of(below: &[(String, u64)], dev: u64, rel: &str) -> u64 {
    for (p, d) in below {
        if let Some(rest) = rel.strip_prefix(p.as_str()) {
            if rest.is_empty() || rest.starts_with('/') {
                return *d;
            }
        }
    }
    dev
}

/// Every mount point in a `mountinfo` text (its fifth field), unescaped.
fn mount_points(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|f| PathBuf::from(unescape(f)))
        .collect()
}

/// mountinfo writes a space, tab, newline and backslash in a path as `\040`,
/// `\011`, `\012` and `\134`.
fn unescape(f: &str) -> String {
    let b = f.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_the_fifth_field_unescaped() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    40 22 0:35 / /srv/mirror/debian rw - tmpfs tmpfs rw\n\
                    41 22 7:0 / /srv/mirror/old\\040isos rw - ext4 /dev/loop0 rw\n";
        assert_eq!(
            mount_points(text),
            [
                PathBuf::from("/"),
                PathBuf::from("/srv/mirror/debian"),
                PathBuf::from("/srv/mirror/old isos"),
            ]
        );
        assert_eq!(unescape("a\\134b\\011c\\9"), "a\\b\tc\\9");
    }

    #[test]
    fn a_path_takes_the_device_of_the_longest_mount_point_it_is_under() {
        let below = vec![("debian/pool".to_string(), 3), ("debian".to_string(), 2)];
        assert_eq!(device_of(&below, 1, "debian/pool/main/x.deb"), 3);
        assert_eq!(device_of(&below, 1, "debian/pool"), 3);
        assert_eq!(device_of(&below, 1, "debian/dists/Release"), 2);
        // Whole segments: `debian-cd` is not under `debian`.
        assert_eq!(device_of(&below, 1, "debian-cd/x.iso"), 1);
        assert_eq!(device_of(&below, 1, "ubuntu/x"), 1);
        assert_eq!(device_of(&[], 1, "debian/x"), 1);
    }
}
