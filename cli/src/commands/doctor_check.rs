//! One line of `tutti doctor`: a check's name, level (`OK`, `WARN`, `FAIL`), what it found
//! and its fix.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
pub(crate) struct Check {
    name: String,
    pub(crate) level: Level,
    message: String,
    fix: Option<String>,
}

pub(crate) fn check(name: impl Into<String>, level: Level, message: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        level,
        message: message.into(),
        fix: None,
    }
}

impl Check {
    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    pub(crate) fn line(&self) -> String {
        let level = match self.level {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        let text = format!("{}: {}", self.name, self.message);
        let text = match &self.fix {
            Some(fix) => format!("{text}; fix: {fix}"),
            None => text,
        };
        let text = crate::output::visible(&crate::output::one_line(&text, 4096));
        format!("{level:<4} {text}")
    }
}
