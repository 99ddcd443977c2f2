//! The error of parsing a name or a value given on the command line or in a file.

/// What was given and why it is not accepted; the message says what to give instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not one of the names this setting takes.
    #[error("unknown {what} `{given}` (use {expected})")]
    Unknown { what: &'static str, given: String, expected: String },
    /// Not of the form this setting takes.
    #[error("`{given}` is not {what} ({why})")]
    Malformed { what: &'static str, given: String, why: String },
}

impl ParseError {
    /// `given` is none of `names`, a list of what `what` takes.
    pub fn unknown<S: ToString>(what: &'static str, given: &str, names: impl IntoIterator<Item = S>) -> ParseError {
        let names: Vec<String> = names.into_iter().map(|n| n.to_string()).collect();
        let expected = match names.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
        };
        ParseError::Unknown { what, given: given.to_string(), expected }
    }

    pub fn malformed(what: &'static str, given: &str, why: impl Into<String>) -> ParseError {
        ParseError::Malformed { what, given: given.to_string(), why: why.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_to_give_instead() {
        assert_eq!(
            ParseError::unknown("layout", "ring", ["chained", "mirrored"]).to_string(),
            "unknown layout `ring` (use chained or mirrored)"
        );
        assert_eq!(
            ParseError::unknown("fault layout", "x", ["best", "worst", "random"]).to_string(),
            "unknown fault layout `x` (use best, worst or random)"
        );
        assert_eq!(
            ParseError::malformed("a ratio like 1:1.5", "1-2", "no `:`").to_string(),
            "`1-2` is not a ratio like 1:1.5 (no `:`)"
        );
    }
}
