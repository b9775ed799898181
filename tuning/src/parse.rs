//! Plain parsers over the text of /proc and /sys files. No I/O here, so
//! every function is tested on fixtures.

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// `major:minor` of the mounted device (major 0 for virtual filesystems).
    pub major: u32,
    pub minor: u32,
    pub mount_point: String,
    /// Per-mount options (`rw,relatime`).
    pub mount_options: String,
    pub fs_type: String,
    pub source: String,
    /// Filesystem-wide options (`rw,discard,data=ordered`).
    pub super_options: String,
}

impl Mount {
    /// Every option, per-mount then filesystem-wide.
    pub fn options(&self) -> impl Iterator<Item = &str> {
        self.mount_options
            .split(',')
            .chain(self.super_options.split(','))
            .filter(|o| !o.is_empty())
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                if let Ok(value) = u8::try_from(value) {
                    out.push(value);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo`; malformed lines are skipped.
pub fn mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(mountinfo_line).collect()
}

fn mountinfo_line(line: &str) -> Option<Mount> {
    // id parent major:minor root mount_point options [optional...] - type source super
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let right: Vec<&str> = right.split(' ').collect();
    if left.len() < 6 || right.len() < 3 {
        return None;
    }
    let (major, minor) = left[2].split_once(':')?;
    Some(Mount {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point: unescape(left[4]),
        mount_options: left[5].to_string(),
        fs_type: right[0].to_string(),
        source: unescape(right[1]),
        super_options: right[2].to_string(),
    })
}

/// The mount holding `path` (absolute, symlinks resolved): the one with the
/// longest mount point that is a prefix of it, the last such one when
/// mounts are stacked.
pub fn mount_for_path<'a>(mounts: &'a [Mount], path: &str) -> Option<&'a Mount> {
    let covers = |mount: &Mount| {
        let point = mount.mount_point.as_str();
        point == "/"
            || path == point
            || (path.starts_with(point) && path.as_bytes().get(point.len()) == Some(&b'/'))
    };
    let mut best: Option<&Mount> = None;
    for mount in mounts.iter().filter(|m| covers(m)) {
        if best.is_none_or(|b| mount.mount_point.len() >= b.mount_point.len()) {
            best = Some(mount);
        }
    }
    best
}

/// The selected entry of a sysfs choice list: `none [mq-deadline] kyber`
/// gives `mq-deadline`; a file with a single word (as written back) gives
/// that word.
pub fn selected(text: &str) -> Option<String> {
    let text = text.trim();
    if let Some(start) = text.find('[') {
        let end = text[start..].find(']')? + start;
        return Some(text[start + 1..end].to_string());
    }
    let mut words = text.split_whitespace();
    let first = words.next()?;
    words.next().is_none().then(|| first.to_string())
}

/// Every entry of a sysfs choice list, brackets removed.
pub fn choices(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
        .collect()
}

/// A kernel CPU list (`0-3,8,10-11`) as CPU numbers; empty text is no CPU.
pub fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to): (u32, u32) = (from.parse().ok()?, to.parse().ok()?);
                if to < from || to - from > 65_536 {
                    return None;
                }
                cpus.extend(from..=to);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// A limit from `/proc/self/limits`: (soft, hard); `None` inside means
/// unlimited.
pub type Limit = (Option<u64>, Option<u64>);

/// The soft and hard value of the limit named `name` (`Max locked memory`).
pub fn proc_limit(text: &str, name: &str) -> Option<Limit> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let mut fields = line[name.len()..].split_whitespace();
    let value = |field: Option<&str>| -> Option<Option<u64>> {
        match field? {
            "unlimited" => Some(None),
            number => number.parse().ok().map(Some),
        }
    };
    Some((value(fields.next())?, value(fields.next())?))
}

/// The effective capability mask from `/proc/self/status` (`CapEff:`).
pub fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

/// CAP_IPC_LOCK's bit number.
pub const CAP_IPC_LOCK: u32 = 14;

/// A sysctl's integer value.
pub fn integer(text: &str) -> Option<i64> {
    text.trim().parse().ok()
}

/// The three numbers of `net.ipv4.tcp_rmem` / `tcp_wmem` (min, default, max).
pub fn triple(text: &str) -> Option<[u64; 3]> {
    let values: Vec<u64> = text
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    values.try_into().ok()
}

/// `major.minor` of a kernel release string (`6.18.44-fc-v857`).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Bytes as a short human figure (`8 MiB`), exact when it is a power unit.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683652k
60 27 259:3 / /var/lib/strom rw,noatime shared:12 - xfs /dev/nvme0n1p1 rw,attr2,inode64,noquota
61 27 259:5 / /mnt/with\\040space rw - ext4 /dev/nvme1n1 rw,data=ordered
";

    #[test]
    fn mountinfo_lines_parse_with_optional_fields_and_escapes() {
        let mounts = mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[1].fs_type, "ext4");
        assert_eq!((mounts[1].major, mounts[1].minor), (254, 0));
        assert_eq!(mounts[3].source, "/dev/nvme0n1p1");
        assert_eq!(mounts[3].mount_options, "rw,noatime");
        assert_eq!(mounts[4].mount_point, "/mnt/with space");
        assert!(mounts[1].options().any(|o| o == "discard"));
        assert!(mountinfo("garbage\n\n1 2 3").is_empty());
    }

    #[test]
    fn the_longest_covering_mount_holds_a_path() {
        let mounts = mountinfo(MOUNTINFO);
        let check = |path: &str, point: &str| {
            assert_eq!(
                mount_for_path(&mounts, path).map(|m| m.mount_point.as_str()),
                Some(point),
                "{path}"
            )
        };
        check("/var/lib/strom/data", "/var/lib/strom");
        check("/var/lib/strom", "/var/lib/strom");
        check("/var/lib/stromboli", "/");
        check("/dev/shm/x", "/dev/shm");
        check("/work/main", "/");
    }

    #[test]
    fn choice_lists() {
        assert_eq!(
            selected("none [mq-deadline] kyber bfq \n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(
            selected("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected("none\n").as_deref(), Some("none"));
        assert_eq!(selected("a b"), None);
        assert_eq!(
            choices("none [mq-deadline] kyber"),
            ["none", "mq-deadline", "kyber"]
        );
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(cpu_list("\n"), Some(vec![]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
    }

    #[test]
    fn limits_capabilities_and_numbers() {
        let limits =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
Max open files            20000                20000                files     \n\
Max locked memory         8388608              unlimited            bytes     \n";
        assert_eq!(
            proc_limit(limits, "Max open files"),
            Some((Some(20000), Some(20000)))
        );
        assert_eq!(
            proc_limit(limits, "Max locked memory"),
            Some((Some(8 << 20), None))
        );
        assert_eq!(proc_limit(limits, "Max processes"), None);
        let status = "Name:\tx\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\n";
        let caps = effective_capabilities(status).unwrap();
        assert_ne!(caps & (1 << CAP_IPC_LOCK), 0);
        assert_eq!(
            effective_capabilities("CapEff:\t0000000000000000\n"),
            Some(0)
        );
        assert_eq!(
            triple("4096\t131072\t33554432\n"),
            Some([4096, 131072, 33554432])
        );
        assert_eq!(triple("1 2"), None);
        assert_eq!(kernel_version("6.18.44-fc-v857\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(integer(" 60\n"), Some(60));
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
