//! `SKILL.md` front matter: `name`, `description`, optional `title`.

pub(crate) mod scan;
#[cfg(test)]
mod scan_props;

use std::path::Path;

#[derive(Debug, serde::Deserialize)]
pub struct SkillMeta {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub title: Option<String>,
}

/// Reads `<release>/<dir>/SKILL.md` (no link followed, at most
/// [`crate::release::SKILL_MAX_BYTES`]) and parses its YAML front matter. The error names
/// the file.
pub fn read_skill(release: &Path, dir: &Path) -> Result<SkillMeta, String> {
    let rel = dir.join("SKILL.md");
    let text = crate::release::read_text(release, &rel, crate::release::SKILL_MAX_BYTES)?;
    parse_front_matter(&text).map_err(|e| format!("{}: {e}", release.join(&rel).display()))
}

pub fn parse_front_matter(text: &str) -> Result<SkillMeta, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("no YAML front matter (the file must start with a --- line)")?;
    let end = rest
        .find("\n---")
        .ok_or("front matter is not closed by a --- line")?;
    let meta: SkillMeta =
        serde_yaml_ng::from_str(&rest[..end]).map_err(|e| format!("front matter: {e}"))?;
    if meta.name.trim().is_empty() {
        return Err("front matter: name must not be empty".into());
    }
    if meta.description.trim().is_empty() {
        return Err("front matter: description must not be empty".into());
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let m = parse_front_matter(
            "---\nname: gh\ndescription: \"Work: with PRs\"\ntitle: GitHub\n---\nbody",
        )
        .expect("ok");
        assert_eq!(
            (m.name.as_str(), m.description.as_str(), m.title.as_deref()),
            ("gh", "Work: with PRs", Some("GitHub"))
        );
        assert!(
            parse_front_matter("name: x")
                .expect_err("must be refused")
                .contains("no YAML front matter")
        );
        assert!(
            parse_front_matter("---\nname: x\n---\n")
                .expect_err("must be refused")
                .contains("description")
        );
        assert!(parse_front_matter("---\nname: [\n---\n").is_err());
    }
}
