//! Located diagnostics: every config or graph error names file, line and column.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::mask_credentials;

/// One error found in a pipeline file, with where it is and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    pub message: String,
    pub help: Option<String>,
    /// A warning: the file is valid, but probably not what was meant.
    pub warning: bool,
    /// The source line and the length of the marked span on it (boxed: errors travel in `Result`s).
    snippet: Option<Box<(String, usize)>>,
}

impl Diagnostic {
    /// Locate `span` (byte offsets) in `src`.
    pub fn at(file: &Path, src: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        let start = span.start.min(src.len());
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let column = src[line_start..start].chars().count() + 1;
        let text = src[line_start..line_end].trim_end_matches('\r').to_string();
        let end = span.end.clamp(start, line_end);
        let len = src[start..end].chars().count().max(1);
        Diagnostic {
            file: file.to_path_buf(),
            line,
            column,
            message: message.into(),
            help: None,
            warning: false,
            snippet: Some(Box::new((text, len))),
        }
    }

    /// An error about the file as a whole (line 1, column 1).
    pub fn whole_file(file: &Path, message: impl Into<String>) -> Self {
        Diagnostic { file: file.to_path_buf(), line: 1, column: 1, message: message.into(), help: None, warning: false, snippet: None }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The same, as a warning rather than an error.
    pub fn into_warning(mut self) -> Self {
        self.warning = true;
        self
    }

    /// `file:line:column: message`, the first line of the rendering.
    pub fn headline(&self) -> String {
        format!("{}:{}:{}: {}", self.file.display(), self.line, self.column, mask_credentials(&self.message))
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A password written in the file (or in a message quoting a URL) is never shown.
        writeln!(f, "{}: {}", if self.warning { "warning" } else { "error" }, mask_credentials(&self.message))?;
        writeln!(f, "  --> {}:{}:{}", self.file.display(), self.line, self.column)?;
        if let Some((text, len)) = self.snippet.as_deref() {
            let num = self.line.to_string();
            let pad = " ".repeat(num.len());
            let shown = mask_credentials(text);
            let len = (*len).min((shown.chars().count() + 1).saturating_sub(self.column)).max(1);
            writeln!(f, "{pad} |")?;
            writeln!(f, "{num} | {shown}")?;
            writeln!(f, "{pad} | {}{}", " ".repeat(self.column - 1), "^".repeat(len))?;
        }
        if let Some(help) = &self.help {
            writeln!(f, "  = help: {}", mask_credentials(help))?;
        }
        Ok(())
    }
}

/// All the errors found in one or more files.
#[derive(Debug, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn sort(&mut self) {
        self.0.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        self.0.dedup();
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{d}")?;
        }
        let n = self.0.len();
        write!(f, "{n} error{} found", if n == 1 { "" } else { "s" })
    }
}

impl std::error::Error for Diagnostics {}

/// The closest candidate to `name`, for "did you mean" hints.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| {
            // Edit distance (with transpositions) catches short names; Jaro-Winkler longer ones.
            let edits = 1.0 - strsim::osa_distance(name, c) as f64 / name.chars().count().max(c.chars().count()).max(1) as f64;
            (strsim::jaro_winkler(name, c).max(edits), c)
        })
        .filter(|(score, _)| *score > 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_line_and_column() {
        let src = "a = 1\n[x]\nhieght = 2\n";
        let d = Diagnostic::at(Path::new("p.toml"), src, 10..16, "unknown field `hieght`");
        assert_eq!(d.headline(), "p.toml:3:1: unknown field `hieght`");
        let text = d.to_string();
        assert!(text.contains("3 | hieght = 2\n  | ^^^^^^\n"), "{text}");
    }

    #[test]
    fn column_counts_characters() {
        let src = "name = \"é\" x";
        let d = Diagnostic::at(Path::new("p.toml"), src, 12..13, "m");
        assert_eq!((d.line, d.column), (1, 12));
    }

    #[test]
    fn suggests_closest() {
        assert_eq!(closest("hieght", ["width", "height"]), Some("height"));
        assert_eq!(closest("zzz", ["width", "height"]), None);
    }
}
