//! Hostile and ordinary archives built in memory, extracted into a sandbox whose surroundings
//! are checked afterwards: nothing may appear outside the destination.

use super::*;
use std::io::Write as _;

/// (name, content or link target, unix mode)
type Spec<'a> = (&'a str, &'a [u8], u32);

fn zip_with(entries: &[Spec<'_>]) -> anyhow::Result<tempfile::NamedTempFile> {
    let file = tempfile::NamedTempFile::new()?;
    let mut w = zip::ZipWriter::new(file.reopen()?);
    for (name, data, mode) in entries {
        let opts = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        if mode & S_IFMT == S_IFLNK {
            w.add_symlink(*name, std::str::from_utf8(data)?, opts)?;
        } else {
            w.start_file(*name, opts)?;
            w.write_all(data)?;
        }
    }
    w.finish()?;
    Ok(file)
}

#[test]
fn keeps_exec_bit_and_layout() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let z = zip_with(&[
        ("terraform-provider-x_v1.0.0", b"bin", 0o755),
        ("docs/README", b"r", 0o644),
    ])?;
    let out = tempfile::tempdir()?;
    extract(z.path(), out.path(), UnzipLimits::default())?;
    let meta = std::fs::metadata(out.path().join("terraform-provider-x_v1.0.0"))?;
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);
    assert_eq!(std::fs::read(out.path().join("docs/README"))?, b"r");
    Ok(())
}

#[test]
fn refuses_escapes_links_out_and_bombs() -> anyhow::Result<()> {
    let cases: Vec<(&str, Vec<Spec<'_>>)> = vec![
        ("dotdot", vec![("../evil", b"x", 0o644)]),
        ("nested dotdot", vec![("a/../../evil", b"x", 0o644)]),
        ("absolute", vec![("/tmp/evil", b"x", 0o644)]),
        (
            "link out",
            vec![("l", b"../../etc/passwd", S_IFLNK | 0o777)],
        ),
        (
            "absolute link",
            vec![("l", b"/etc/passwd", S_IFLNK | 0o777)],
        ),
        ("too big", vec![("f", &[0u8; 4096], 0o644)]),
    ];
    let limits = UnzipLimits {
        max_total_bytes: 1024,
        max_entries: 10,
    };
    for (name, entries) in cases {
        let z = zip_with(&entries)?;
        let out = tempfile::tempdir()?;
        let err = extract(z.path(), out.path(), limits).expect_err(name);
        assert!(matches!(err, Error::UnsafeArchive { .. }), "{name}: {err}");
    }
    Ok(())
}

#[test]
fn links_inside_the_package_are_kept() -> anyhow::Result<()> {
    let z = zip_with(&[
        ("bin/real", b"x", 0o755),
        ("bin/alias", b"real", S_IFLNK | 0o777),
    ])?;
    let out = tempfile::tempdir()?;
    extract(z.path(), out.path(), UnzipLimits::default())?;
    assert_eq!(std::fs::read(out.path().join("bin/alias"))?, b"x");
    Ok(())
}

#[test]
fn truncated_archive_is_invalid() -> anyhow::Result<()> {
    let z = zip_with(&[("f", &[7u8; 10_000], 0o644)])?;
    let bytes = std::fs::read(z.path())?;
    let cut = tempfile::NamedTempFile::new()?;
    std::fs::write(cut.path(), &bytes[..bytes.len() / 2])?;
    let out = tempfile::tempdir()?;
    let err = extract(cut.path(), out.path(), UnzipLimits::default()).expect_err("truncated");
    assert!(matches!(err, Error::InvalidArchive { .. }), "{err}");
    Ok(())
}

const LINK: u32 = S_IFLNK | 0o777;

/// A destination two levels inside a private directory, so an escape by one or two `..` lands
/// somewhere the test can see.
struct Sandbox {
    outer: tempfile::TempDir,
    dest: PathBuf,
}

impl Sandbox {
    fn new() -> anyhow::Result<Self> {
        let outer = tempfile::tempdir()?;
        let dest = outer.path().join("top").join("pkg");
        std::fs::create_dir_all(&dest)?;
        Ok(Self { outer, dest })
    }

    fn extract(&self, entries: &[Spec<'_>]) -> anyhow::Result<Result<()>> {
        let z = zip_with(entries)?;
        Ok(extract(z.path(), &self.dest, UnzipLimits::default()))
    }

    /// Everything under the sandbox that is not the destination or inside it.
    fn outside(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let mut dirs = vec![self.outer.path().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.starts_with(&self.dest) {
                    continue;
                }
                if std::fs::symlink_metadata(&path)?.is_dir() {
                    dirs.push(path.clone());
                }
                out.push(path);
            }
        }
        out.retain(|p| p != &self.outer.path().join("top"));
        Ok(out)
    }

    /// The archive is refused naming `entry`, and nothing was written outside the destination.
    fn assert_refused(&self, entries: &[Spec<'_>], entry: &str) -> anyhow::Result<()> {
        let err = match self.extract(entries)? {
            Ok(()) => anyhow::bail!("archive naming {entry:?} was accepted"),
            Err(e) => e,
        };
        assert!(matches!(err, Error::UnsafeArchive { .. }), "{err}");
        assert!(err.to_string().contains(&format!("{entry:?}")), "{err}");
        assert_eq!(self.outside()?, Vec::<PathBuf>::new(), "written outside");
        Ok(())
    }
}

#[test]
fn chain_of_links_cannot_escape() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    sb.assert_refused(
        &[
            ("a/b", b"..", LINK),
            ("c", b"a/b/../..", LINK),
            ("c/x", b"pwned", 0o644),
        ],
        "c",
    )
}

#[test]
fn direct_dotdot_link_is_refused() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    sb.assert_refused(&[("l", b"../x", LINK), ("l/y", b"pwned", 0o644)], "l")
}

#[test]
fn absolute_link_is_refused() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let target = sb.outer.path().display().to_string();
    sb.assert_refused(
        &[("l", target.as_bytes(), LINK), ("l/y", b"pwned", 0o644)],
        "l",
    )
}

#[test]
fn nothing_is_written_through_an_inside_link() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    let dir_link = [("d/", &b""[..], 0o755), ("l", b"d", LINK)];
    sb.assert_refused(&[dir_link[0], dir_link[1], ("l/x", b"x", 0o644)], "l/x")?;
    assert_eq!(std::fs::read_dir(sb.dest.join("d"))?.count(), 0);

    let sb = Sandbox::new()?;
    sb.assert_refused(
        &[dir_link[0], dir_link[1], ("l/sub/", b"", 0o755)],
        "l/sub/",
    )?;

    // A file entry named like an existing link (spelled differently, as zip writers refuse
    // exact duplicates) would replace or follow it.
    let sb = Sandbox::new()?;
    sb.assert_refused(
        &[("f", b"x", 0o644), ("l", b"f", LINK), ("./l", b"y", 0o644)],
        "./l",
    )?;
    assert_eq!(std::fs::read(sb.dest.join("f"))?, b"x");
    Ok(())
}

#[test]
fn link_to_a_link_that_escapes_is_refused() -> anyhow::Result<()> {
    // Made before its target exists, then the target turns out to climb out.
    let sb = Sandbox::new()?;
    sb.assert_refused(&[("l2", b"l1", LINK), ("l1", b"../../x", LINK)], "l1")?;
    // Each hop stays inside; only following them shows `m` climbing out.
    let sb = Sandbox::new()?;
    sb.assert_refused(
        &[
            ("d/up", b"..", LINK),
            ("l", b"d/up", LINK),
            ("m", b"l/..", LINK),
        ],
        "m",
    )?;
    // Harmless when made (`x` missing), escaping once a later entry makes `x` a link.
    let sb = Sandbox::new()?;
    sb.assert_refused(&[("l", b"x/..", LINK), ("x", b".", LINK)], "l")?;
    // A cycle resolves nowhere.
    let sb = Sandbox::new()?;
    sb.assert_refused(&[("a", b"b", LINK), ("b", b"a", LINK)], "a")
}

#[test]
fn links_to_directories_inside_are_kept() -> anyhow::Result<()> {
    let sb = Sandbox::new()?;
    sb.extract(&[
        ("share/doc/README", b"r", 0o644),
        ("docs", b"share/doc", LINK),
        ("bin/readme", b"../docs/README", LINK),
    ])??;
    assert_eq!(std::fs::read(sb.dest.join("bin/readme"))?, b"r");
    assert_eq!(sb.outside()?, Vec::<PathBuf>::new());
    Ok(())
}
