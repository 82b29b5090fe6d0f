//! Credentials in URLs never reach a log line, an error, a report or a metric.
//!
//! `rtsp://user:secret@cam/stream` is shown as `rtsp://user:***@cam/stream`,
//! and `rtsp://cam/live?user=admin&password=secret` as
//! `rtsp://cam/live?user=admin&password=***` (every query parameter whose name
//! says credential: [`is_secret_param`]). [`mask_credentials`] works on a bare
//! URL and on any text that contains URLs (an FFmpeg error, a diagnostic's
//! source line), so every place that prints a URI goes through this one function.

use std::borrow::Cow;

/// What replaces a password.
pub const MASK: &str = "***";

/// Query parameter names (compared without case, `-`, `_` and `.`) whose value is a secret.
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "pw", "key", "sig", "secret", "auth", "credential", "credentials", "session", "sid", "jwt"];

/// Query parameter names that hold a secret wherever these occur in them
/// (`password`, `access_token`, `x-amz-signature`, `apikey`, `client_secret`, `authorization`, ...).
const SECRET_PARTS: &[&str] =
    &["passw", "passwd", "secret", "token", "signature", "apikey", "accesskey", "privatekey", "auth", "credential", "sessionid"];

/// Whether a query parameter named `name` holds a credential.
pub fn is_secret_param(name: &str) -> bool {
    let n: String = name.chars().filter(|c| !"-_.".contains(*c)).flat_map(char::to_lowercase).collect();
    SECRET_PARAMS.contains(&n.as_str()) || SECRET_PARTS.iter().any(|p| n.contains(p)) || n.ends_with("key")
}

/// Where a URL ends in free text.
fn ends_url(c: char) -> bool {
    "\"'<>`".contains(c) || c.is_whitespace()
}

/// `text` with the password of every `scheme://user:password@host` in it,
/// and the value of every credential-like query parameter of such a URL
/// (`?password=...`, `&token=...`), replaced by `***`. The authority ends
/// where FFmpeg ends it (the first `/`, `?` or `#`), and the user info runs to
/// its last `@`, as FFmpeg parses it; whitespace and quotes also end a URL in
/// free text. A parameter's value runs to the next `&`, `;` or `#`.
pub fn mask_credentials(text: &str) -> Cow<'_, str> {
    // The byte ranges of the secrets, found URL by URL; replaced at the end.
    let mut secrets: Vec<std::ops::Range<usize>> = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("://").map(|i| from + i) {
        let start = i + 3;
        let scheme_ok = text[..i].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric());
        let end = text[start..].find(|c: char| "/?#".contains(c) || ends_url(c)).map_or(text.len(), |e| start + e);
        // Another URL may start inside this one (`?src=rtsp://u:p@h`): look on from the authority's end.
        from = end.max(start);
        if !scheme_ok {
            continue;
        }
        let authority = &text[start..end];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
        {
            secrets.push(start + colon + 1..start + at);
        }
        // The rest of the URL: path, then the query up to its fragment.
        let url_end = text[end..].find(ends_url).map_or(text.len(), |e| end + e);
        let Some(q) = text[end..url_end].find('?').map(|q| end + q) else { continue };
        let query_end = text[q..url_end].find('#').map_or(url_end, |h| q + h);
        let mut p = q + 1;
        while p < query_end {
            let param_end = text[p..query_end].find(['&', ';']).map_or(query_end, |e| p + e);
            if let Some(eq) = text[p..param_end].find('=').map(|e| p + e)
                && eq + 1 < param_end
                && is_secret_param(&text[p..eq])
            {
                secrets.push(eq + 1..param_end);
            }
            p = param_end + 1;
        }
    }
    secrets.sort_by_key(|r| r.start);
    let mut out = String::new();
    let mut done = 0; // bytes of `text` already copied to `out`
    for r in secrets {
        // Inside a secret already masked, or masked before (idempotence).
        if r.start < done || text[r.clone()].starts_with(MASK) {
            continue;
        }
        out.push_str(&text[done..r.start]);
        out.push_str(MASK);
        done = r.end;
    }
    if done == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_the_password_only() {
        assert_eq!(mask_credentials("rtsp://admin:s3cret@10.0.0.5:554/live/ch1"), "rtsp://admin:***@10.0.0.5:554/live/ch1");
        assert_eq!(mask_credentials("rtsps://u:p@cam"), "rtsps://u:***@cam");
        assert_eq!(mask_credentials("rtsp://u:p@cam?x=1"), "rtsp://u:***@cam?x=1");
    }

    #[test]
    fn leaves_urls_without_a_password_alone() {
        for s in ["rtsp://127.0.0.1:8554/cam", "rtsp://user@cam/x", "samples/clip.mp4", "http://host/a:b@c", "", "://", "a://"] {
            assert!(matches!(mask_credentials(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn password_with_at_and_colon() {
        // FFmpeg splits user info at its last `@` and the password at the first `:`.
        assert_eq!(mask_credentials("rtsp://user:p@ss:w0rd@host:554/x"), "rtsp://user:***@host:554/x");
        assert_eq!(mask_credentials("rtsp://:only@host/"), "rtsp://:***@host/");
    }

    #[test]
    fn masks_every_url_in_free_text() {
        let text = "cannot open rtsp://a:one@h1/x: refused; tried 'rtsp://b:two@h2' and \"srt://c:three@h3\"";
        assert_eq!(mask_credentials(text), "cannot open rtsp://a:***@h1/x: refused; tried 'rtsp://b:***@h2' and \"srt://c:***@h3\"");
        assert!(!mask_credentials(text).contains("one"));
    }

    #[test]
    fn masking_is_idempotent() {
        for url in ["rtsp://u:pw@h/x", "rtsp://h/x?password=S&user=u", "rtsp://u:pw@h/x?token=T#frag"] {
            let once = mask_credentials(url).into_owned();
            assert_eq!(mask_credentials(&once), once);
        }
    }

    #[test]
    fn masks_credential_query_parameters() {
        assert_eq!(mask_credentials("rtsp://host/cam?user=admin&password=S"), "rtsp://host/cam?user=admin&password=***");
        assert_eq!(
            mask_credentials("http://h/a?pass=1&pwd=2&token=3&key=4&secret=5&auth=6&signature=7&x=8"),
            "http://h/a?pass=***&pwd=***&token=***&key=***&secret=***&auth=***&signature=***&x=8"
        );
        assert_eq!(
            mask_credentials("https://b.s3/o?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1&access_token=t;api_key=k#pw=keep"),
            "https://b.s3/o?X-Amz-Signature=***&X-Amz-Credential=***&access_token=***;api_key=***#pw=keep"
        );
        // Both kinds in one URL, and in free text ended by a quote or a space.
        assert_eq!(mask_credentials("rtsp://u:p@h/x?PassWord=S"), "rtsp://u:***@h/x?PassWord=***");
        let text = "cannot open 'rtsp://h/x?token=T1' nor rtsp://h/y?sid=T2 (refused)";
        assert_eq!(mask_credentials(text), "cannot open 'rtsp://h/x?token=***' nor rtsp://h/y?sid=*** (refused)");
        // A URL inside another's query.
        assert_eq!(mask_credentials("http://h/?src=rtsp://u:p@c/x&token=T"), "http://h/?src=rtsp://u:***@c/x&token=***");
        // Parameters that are not credentials, and empty values, stay.
        for s in ["rtsp://h/x?user=admin&channel=1&subtype=0", "http://h/?keyframes=1", "rtsp://h/x?password=", "a/b?password=S"] {
            assert!(matches!(mask_credentials(s), Cow::Borrowed(_)), "{s}");
        }
    }
}
