//! Credentials in URLs never reach a log line, an error, a report or a metric.
//!
//! `rtsp://user:secret@cam/stream` is shown as `rtsp://user:***@cam/stream`.
//! [`mask_credentials`] works on a bare URL and on any text that contains URLs
//! (an FFmpeg error, a diagnostic's source line), so every place that prints a
//! URI goes through this one function.

use std::borrow::Cow;

/// What replaces a password.
pub const MASK: &str = "***";

/// `text` with the password of every `scheme://user:password@host` in it
/// replaced by `***`. The authority ends where FFmpeg ends it (the first `/`,
/// `?` or `#`), and the user info runs to its last `@`, as FFmpeg parses it;
/// whitespace and quotes also end it in free text.
pub fn mask_credentials(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut done = 0; // bytes of `text` already copied to `out`
    let mut from = 0;
    while let Some(i) = text[from..].find("://").map(|i| from + i) {
        let start = i + 3;
        let scheme_ok = text[..i].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric());
        let end = text[start..].find(|c: char| "/?#\"'<>`".contains(c) || c.is_whitespace()).map_or(text.len(), |e| start + e);
        let authority = &text[start..end];
        if scheme_ok
            && let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
        {
            let (pw_start, pw_end) = (start + colon + 1, start + at);
            if text[pw_start..pw_end] != *MASK {
                out.push_str(&text[done..pw_start]);
                out.push_str(MASK);
                done = pw_end;
            }
        }
        from = end.max(start);
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
        let once = mask_credentials("rtsp://u:pw@h/x").into_owned();
        assert_eq!(mask_credentials(&once), once);
    }
}
