//! A clip's path: the `clips` sink's template (`{stream}`,
//! `{start:FORMAT}`, `{event}`, `{seq}`) filled in, with the UTC time its
//! `{start}` shows.

/// UTC civil date and time of `secs` since the Unix epoch: (y, m, d, H, M, S).
fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's days-from-civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

/// `format` with `%Y %m %d %H %M %S %%` filled in for `secs` (UTC); `Err` names an unknown one.
pub fn format_time(format: &str, secs: i64) -> Result<String, String> {
    let (y, mo, d, h, mi, s) = civil(secs);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{y:04}")),
            Some('m') => out.push_str(&format!("{mo:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('%') => out.push('%'),
            Some(x) => return Err(format!("`%{x}` is not a time field here (use %Y %m %d %H %M %S)")),
            None => return Err("a `%` ends the format".into()),
        }
    }
    Ok(out)
}

/// What a clip's path is made of.
pub struct Fill<'a> {
    pub stream: &'a str,
    /// Wall-clock seconds since the Unix epoch at the clip's start.
    pub start: i64,
    pub event: &'a str,
    pub seq: u64,
}

/// The template with its fields filled in; `Err` says which field is wrong.
pub fn fill(template: &str, f: &Fill<'_>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').ok_or("a `{` without its `}`")? + open;
        let field = &rest[open + 1..close];
        let (name, format) = field.split_once(':').unwrap_or((field, "%Y%m%d-%H%M%S"));
        match name {
            "stream" => out.push_str(&super::paths::stream_file_name(f.stream)),
            "event" => out.push_str(&super::paths::stream_file_name(f.event)),
            "seq" => out.push_str(&f.seq.to_string()),
            "start" => out.push_str(&format_time(format, f.start)?),
            other => {
                return Err(format!(
                    "`{{{other}}}` is not a field of a clip's path (use {{stream}}, {{start:%Y%m%d-%H%M%S}}, {{event}}, {{seq}})"
                ));
            }
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_templates() {
        // 2026-12-02 11:10:56 UTC.
        assert_eq!(format_time("%Y%m%d-%H%M%S", 1_796_209_856).unwrap(), "20261202-111056");
        assert_eq!(format_time("%Y-%m-%d", 951_782_400).unwrap(), "2000-02-29");
        assert!(format_time("%Q", 0).is_err());
        let f = Fill { stream: "cam 1", start: 0, event: "crossed", seq: 7 };
        assert_eq!(
            fill("clips/{stream}/{start:%Y%m%d-%H%M%S}-{event}-{seq}.mp4", &f).unwrap(),
            "clips/cam_1/19700101-000000-crossed-7.mp4"
        );
        assert!(fill("{nope}.mp4", &f).is_err());
    }
}
