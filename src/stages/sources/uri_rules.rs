//! The value rules of a source template (`dynamic = true`): which inputs the
//! `uri` of a stream added through the API may name. `allow` says which keys a
//! request may set; these say which values `uri` may take:
//!
//! - `schemes`: the URL schemes allowed (`rtsp` template: `rtsp`, `rtsps`;
//!   `file` template: none, so no network input unless listed).
//! - `hosts`: host names, `*.suffix` patterns, IP addresses and CIDR ranges
//!   (`*`: any). Unset: any host. Link-local addresses (169.254.0.0/16,
//!   fe80::/10) and cloud metadata services (169.254.169.254, fd00:ec2::254,
//!   100.100.100.200, `metadata.google.internal`) are refused unless an entry
//!   names them (an address or range holding them, or the name itself; `*`
//!   does not). A name is resolved and every address it has is checked.
//! - `roots` (`file` template): the folders a path may lie in, relative to the
//!   pipeline file's folder. Unset: no path is accepted. A path is resolved
//!   (`..` and symbolic links followed) and must stay inside a root; what is
//!   opened is the resolved path, and a path outside every root is refused
//!   with the same words whether or not it exists.
//!
//! Checked when a stream is added, before anything is opened. What the
//! template's own `uri` names (its default) is the pipeline author's and is
//! not checked here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};
use std::path::{Component, Path, PathBuf};

use toml::Spanned;

use crate::config::{Diagnostic, PipelineConfig};

/// Addresses of cloud metadata services, refused unless listed.
const METADATA_V4: [Ipv4Addr; 2] = [Ipv4Addr::new(169, 254, 169, 254), Ipv4Addr::new(100, 100, 100, 200)];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);
/// Names of cloud metadata services, refused unless listed.
const METADATA_NAMES: &[&str] = &["metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"];

/// The words for a path outside every root (the same whether or not it exists).
const OUTSIDE: &str = "is not a file under the folders this template allows (its `roots`)";

/// One entry of `hosts`.
#[derive(Debug, Clone, PartialEq)]
enum HostPattern {
    /// `*`: any host (but not the refused ranges).
    Any,
    /// A name, lower case, without a final dot.
    Name(String),
    /// `*.example.com`: names ending in `.example.com` (stored with its dot).
    Suffix(String),
    /// An address or a range: `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`.
    Net(IpAddr, u8),
}

impl HostPattern {
    fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim().trim_end_matches('.').to_ascii_lowercase();
        if s == "*" {
            return Ok(HostPattern::Any);
        }
        if let Some(suffix) = s.strip_prefix("*.") {
            return if is_name(suffix) {
                Ok(HostPattern::Suffix(format!(".{suffix}")))
            } else {
                Err(format!("`{s}` is not a host pattern"))
            };
        }
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s.as_str(), None),
        };
        let addr = addr.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = addr.parse::<IpAddr>() {
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => max,
                Some(b) => b.parse::<u8>().ok().filter(|b| *b <= max).ok_or_else(|| format!("`{s}`: a range's prefix is 0 to {max}"))?,
            };
            return Ok(HostPattern::Net(ip, bits));
        }
        if bits.is_none() && is_name(&s) { Ok(HostPattern::Name(s)) } else { Err(format!("`{s}` is not a host pattern")) }
    }

    fn matches_name(&self, name: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Name(n) => n == name,
            HostPattern::Suffix(s) => name.ends_with(s.as_str()),
            HostPattern::Net(..) => false,
        }
    }

    /// Whether this entry is an address or range holding `ip`.
    fn holds(&self, ip: IpAddr) -> bool {
        let HostPattern::Net(net, bits) = self else { return false };
        match (net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(u32::from(*n) as u128, u32::from(a) as u128, 32, *bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(u128::from(*n), u128::from(a), 128, *bits),
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, width: u32, bits: u8) -> bool {
    let shift = width - bits as u32;
    shift >= width || (a >> shift) == (b >> shift)
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
}

/// An IPv4 address carried in an IPv6 one (mapped, or NAT64's `64:ff9b::/96`).
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = a.segments();
    (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]).then(|| Ipv4Addr::from((u128::from(a) as u32).to_be_bytes()))
}

/// Link-local or a metadata service: refused unless `hosts` lists it.
pub fn is_refused_by_default(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local() || METADATA_V4.contains(&a),
        IpAddr::V6(a) => {
            (a.segments()[0] & 0xffc0) == 0xfe80
                || a == METADATA_V6
                || embedded_v4(a).is_some_and(|v4| is_refused_by_default(IpAddr::V4(v4)))
        }
    }
}

/// The value rules of one template.
#[derive(Debug, Clone)]
pub struct UriRules {
    /// The template's kind: `rtsp` or `file`.
    kind: &'static str,
    /// Allowed schemes, lower case.
    schemes: Vec<String>,
    /// `hosts`; `None`: any host but the refused ranges.
    hosts: Option<Vec<HostPattern>>,
    /// The roots, resolved (canonical).
    roots: Vec<PathBuf>,
    /// Relative paths start here (the pipeline file's folder).
    base_dir: PathBuf,
}

impl UriRules {
    /// Read the rules of template `node` (kind `kind`), checking each entry.
    pub fn from_config(
        cfg: &PipelineConfig,
        kind: &'static str,
        schemes: Option<&[Spanned<String>]>,
        hosts: Option<&[Spanned<String>]>,
        roots: Option<&[Spanned<String>]>,
    ) -> Result<Self, Diagnostic> {
        let schemes = match schemes {
            None if kind == "rtsp" => vec!["rtsp".into(), "rtsps".into()],
            None => Vec::new(),
            Some(list) => {
                let mut out = Vec::new();
                for s in list {
                    let v = s.get_ref().trim().to_ascii_lowercase();
                    let fits = !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
                    if !fits {
                        return Err(cfg
                            .diag(s.span(), format!("`{v}` is not a URL scheme"))
                            .with_help("write schemes as in `schemes = [\"rtsp\", \"rtsps\"]`"));
                    }
                    if kind == "rtsp" && !["rtsp", "rtsps"].contains(&v.as_str()) {
                        return Err(cfg.diag(s.span(), format!("an rtsp source opens rtsp:// and rtsps:// only, not `{v}`")));
                    }
                    if v == "file" {
                        return Err(cfg
                            .diag(s.span(), "paths need no scheme")
                            .with_help("list the folders added streams may read in `roots`; `uri` is then a path"));
                    }
                    out.push(v);
                }
                out
            }
        };
        let hosts = match hosts {
            None => None,
            Some(list) => Some(
                list.iter()
                    .map(|h| {
                        HostPattern::parse(h.get_ref()).map_err(|e| {
                            cfg.diag(h.span(), e)
                                .with_help("a host name (`cam-1.example.com`), `*.example.com`, an address (`10.0.0.5`), a range (`10.0.0.0/8`) or `*`")
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let mut resolved = Vec::new();
        for r in roots.unwrap_or_default() {
            let path = cfg.resolve_path(r)?;
            let canonical = path.canonicalize().map_err(|e| cfg.diag(r.span(), format!("`roots`: cannot use {}: {e}", path.display())))?;
            if !canonical.is_dir() {
                return Err(cfg.diag(r.span(), format!("`roots`: {} is not a folder", path.display())));
            }
            resolved.push(canonical);
        }
        Ok(UriRules { kind, schemes, hosts, roots: resolved, base_dir: cfg.base_dir.clone() })
    }

    /// Check the `uri` a request gives; `Ok`: the input to open (a path
    /// resolved), `Err`: why it is refused (the `uri` is not in it).
    pub fn check(&self, uri: &str) -> Result<String, String> {
        match uri.split_once("://") {
            Some((scheme, rest)) if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) => {
                self.check_url(&scheme.to_ascii_lowercase(), rest).map(|()| uri.to_string())
            }
            _ if self.kind == "rtsp" => Err(NOT_RTSP.into()),
            _ => self.check_path(uri).map(|p| p.to_string_lossy().into_owned()),
        }
    }

    fn check_url(&self, scheme: &str, rest: &str) -> Result<(), String> {
        if !self.schemes.iter().any(|s| s == scheme) {
            return Err(match self.kind {
                "rtsp" if !["rtsp", "rtsps"].contains(&scheme) => NOT_RTSP.into(),
                _ if self.schemes.is_empty() => {
                    format!("`{scheme}://` inputs are not allowed: this template opens files (its `schemes` lists no network scheme)")
                }
                _ => format!("`{scheme}://` is not allowed by this template (`schemes`: {})", self.schemes.join(", ")),
            });
        }
        // The authority ends where FFmpeg ends it; the user info runs to its last `@`.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = match hostport.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => hostport.split(':').next().unwrap_or(""),
        };
        if host.is_empty() {
            return Err("names no host".into());
        }
        let port = hostport.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).unwrap_or(match scheme {
            "rtsp" => 554,
            "rtsps" => 322,
            "https" => 443,
            _ => 80,
        });
        self.check_host(host, port)
    }

    fn check_host(&self, host: &str, port: u16) -> Result<(), String> {
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let listed = |ok: &dyn Fn(&HostPattern) -> bool| self.hosts.as_ref().is_some_and(|h| h.iter().any(ok));
        let refused = "link-local and cloud metadata addresses are refused unless the template's `hosts` names them";
        if METADATA_NAMES.contains(&name.as_str()) && !listed(&|p| *p == HostPattern::Name(name.clone())) {
            return Err(format!("host `{name}`: {refused}"));
        }
        // Resolved as FFmpeg resolves it (getaddrinfo), numeric forms such as `2852039166` included.
        let addrs: Vec<IpAddr> = match name.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let mut v: Vec<IpAddr> = (host, port)
                    .to_socket_addrs()
                    .map_err(|_| format!("host `{name}` does not resolve to an address"))?
                    .map(|a| a.ip())
                    .collect();
                v.sort();
                v.dedup();
                v
            }
        };
        if addrs.is_empty() {
            return Err(format!("host `{name}` does not resolve to an address"));
        }
        for ip in &addrs {
            let ip = match ip {
                IpAddr::V6(a) => embedded_v4(*a).map_or(*ip, IpAddr::V4),
                _ => *ip,
            };
            if is_refused_by_default(ip) && !listed(&|p| p.holds(ip)) && !listed(&|p| *p == HostPattern::Name(name.clone())) {
                let shown = if name == ip.to_string() { String::new() } else { format!(" ({ip})") };
                return Err(format!("host `{name}`{shown}: {refused}"));
            }
        }
        if let Some(hosts) = &self.hosts {
            let by_name = hosts.iter().any(|p| p.matches_name(&name));
            let by_addr = addrs.iter().all(|ip| hosts.iter().any(|p| p.holds(*ip)));
            if !by_name && !by_addr {
                return Err(format!("host `{name}` is not one this template allows (its `hosts`)"));
            }
        }
        Ok(())
    }

    /// A path: inside a root once resolved, and a file.
    fn check_path(&self, uri: &str) -> Result<PathBuf, String> {
        if self.roots.is_empty() {
            return Err("paths are not allowed: this template sets no `roots` (the folders added streams may read)".into());
        }
        let p = Path::new(uri);
        if uri.is_empty() || uri == "-" || uri.contains('\0') || p.components().any(|c| c == Component::ParentDir) {
            return Err(OUTSIDE.into());
        }
        let path = self.base_dir.join(p);
        // The deepest folder of it that exists, resolved: outside every root,
        // the answer is the same whether or not the rest exists.
        let mut existing = path.as_path();
        let resolved = loop {
            match existing.canonicalize() {
                Ok(c) => break c,
                Err(_) => match existing.parent() {
                    Some(up) => existing = up,
                    None => return Err(OUTSIDE.into()),
                },
            }
        };
        if !self.inside(&resolved) {
            return Err(OUTSIDE.into());
        }
        if existing != path {
            return Err("no such file (relative paths start at the pipeline file's folder)".into());
        }
        if !resolved.is_file() {
            return Err("is not a file".into());
        }
        Ok(resolved)
    }

    fn inside(&self, resolved: &Path) -> bool {
        self.roots.iter().any(|r| resolved.starts_with(r))
    }
}

const NOT_RTSP: &str = "is not an RTSP address: write rtsp://HOST[:PORT]/PATH (credentials as user:password@ before the host)";

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(kind: &'static str, hosts: Option<&[&str]>, roots: &[PathBuf], schemes: Option<&[&str]>) -> UriRules {
        UriRules {
            kind,
            schemes: schemes.map_or_else(
                || if kind == "rtsp" { vec!["rtsp".into(), "rtsps".into()] } else { vec![] },
                |s| s.iter().map(|s| s.to_string()).collect(),
            ),
            hosts: hosts.map(|h| h.iter().map(|h| HostPattern::parse(h).unwrap()).collect()),
            roots: roots.iter().map(|r| r.canonicalize().unwrap()).collect(),
            base_dir: roots.first().cloned().unwrap_or_else(|| PathBuf::from("/")),
        }
    }

    #[test]
    fn rtsp_defaults_refuse_link_local_and_metadata_only() {
        let r = rules("rtsp", None, &[], None);
        assert!(r.check("rtsp://127.0.0.1:8554/cam").is_ok());
        assert!(r.check("rtsp://u:p@10.1.2.3/cam?x=1").is_ok());
        for bad in [
            "rtsp://169.254.169.254/latest/meta-data/",
            "rtsp://169.254.1.1/x",
            "rtsp://[fe80::1]:554/x",
            "rtsp://[fd00:ec2::254]/x",
            "rtsp://[::ffff:169.254.169.254]/x",
            "rtsp://metadata.google.internal/x",
            "rtsp://Metadata.Google.Internal./x",
            "rtsp://2852039166/x",
            "rtsp://0xa9fea9fe/x",
            "rtsp://u:p@169.254.169.254:8554/x",
        ] {
            let e = r.check(bad).unwrap_err();
            assert!(e.contains("refused unless the template's `hosts` names them"), "{bad}: {e}");
        }
        assert!(r.check("http://127.0.0.1/x").unwrap_err().contains("is not an RTSP address"));
        assert!(r.check("/etc/passwd").unwrap_err().contains("is not an RTSP address"));
        assert_eq!(r.check("rtsp:///x").unwrap_err(), "names no host");
    }

    #[test]
    fn hosts_narrow_and_may_name_the_refused_ranges() {
        let r = rules("rtsp", Some(&["*.cams.example", "10.0.0.0/8", "127.0.0.1"]), &[], Some(&["rtsps"]));
        assert!(r.check("rtsps://10.20.30.40/x").is_ok());
        assert!(r.check("rtsps://127.0.0.1/x").is_ok());
        assert!(r.check("rtsps://192.168.0.1/x").unwrap_err().contains("is not one this template allows"));
        assert!(r.check("rtsp://10.0.0.1/x").unwrap_err().contains("is not allowed by this template (`schemes`: rtsps)"));
        assert!(r.check("rtsps://169.254.169.254/x").unwrap_err().contains("refused"), "* and other entries do not open it");
        let r = rules("rtsp", Some(&["169.254.0.0/16"]), &[], None);
        assert!(r.check("rtsp://169.254.10.10/x").is_ok());
        let any = rules("rtsp", Some(&["*"]), &[], None);
        assert!(any.check("rtsp://169.254.10.10/x").is_err());
        assert!(any.check("rtsp://192.168.0.1/x").is_ok());
    }

    #[test]
    fn patterns() {
        assert_eq!(HostPattern::parse("Cam.Example.").unwrap(), HostPattern::Name("cam.example".into()));
        assert!(HostPattern::parse("10.0.0.0/33").is_err());
        assert!(HostPattern::parse("a b").is_err());
        assert!(HostPattern::parse("fd00::/8").unwrap().holds("fdff::1".parse().unwrap()));
        assert!(!HostPattern::parse("fd00::/8").unwrap().holds("fe00::1".parse().unwrap()));
        assert!(HostPattern::parse("0.0.0.0/0").unwrap().holds("1.2.3.4".parse().unwrap()));
        assert!(HostPattern::parse("*.example.com").unwrap().matches_name("a.example.com"));
        assert!(!HostPattern::parse("*.example.com").unwrap().matches_name("badexample.com"));
    }

    #[test]
    fn file_paths_stay_in_their_roots_and_say_the_same_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("media");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/clip.mp4"), b"x").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.mp4")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        let r = rules("file", None, std::slice::from_ref(&root), None);
        let canon = root.canonicalize().unwrap();
        assert_eq!(r.check("sub/clip.mp4").unwrap(), canon.join("sub/clip.mp4").to_string_lossy());
        assert_eq!(r.check(&canon.join("sub/clip.mp4").to_string_lossy()).unwrap(), canon.join("sub/clip.mp4").to_string_lossy());
        for outside in [
            "/etc/passwd",
            "/etc/no-such-file",
            "/no/such/folder/x",
            "../secret.txt",
            "../../../../etc/shadow",
            "sub/../../secret.txt",
            "link.mp4",
            "up/secret.txt",
            "up/missing.txt",
            "-",
            "",
        ] {
            assert_eq!(r.check(outside).unwrap_err(), OUTSIDE, "{outside}");
        }
        assert!(r.check("missing.mp4").unwrap_err().starts_with("no such file"));
        assert_eq!(r.check("sub").unwrap_err(), "is not a file");
        assert!(r.check("tcp://127.0.0.1:18080").unwrap_err().contains("lists no network scheme"));
        assert!(r.check("http://169.254.169.254/latest/meta-data/").unwrap_err().contains("lists no network scheme"));
        // No roots: no path at all.
        let none = rules("file", None, &[], None);
        assert!(none.check("/etc/passwd").unwrap_err().contains("sets no `roots`"));
        // Network schemes when listed, with the host rules.
        let web = rules("file", None, &[], Some(&["https"]));
        assert!(web.check("https://127.0.0.1/a.mp4").is_ok());
        assert!(web.check("https://169.254.169.254/latest/meta-data/").unwrap_err().contains("refused"));
        assert!(web.check("http://127.0.0.1/a.mp4").unwrap_err().contains("(`schemes`: https)"));
    }
}
