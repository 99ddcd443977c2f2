//! The commit rule: how a write that a crash interrupted is finished or rolled back.
//!
//! A dataset is written under a transaction: `stage` on every server of the write, the
//! data, `prepare` on every one (data and checksums synced, the final manifest written
//! beside them), then `commit` (rename into `datasets/`). The client names one server of the
//! write its **coordinator** in every `prepare` and commits it first, alone.
//!
//! **The rule.** The write is committed exactly when the coordinator has renamed its
//! staging folder into `datasets/`. Before that it can still be rolled back; after it,
//! only rolled forward. So:
//! - the client commits the others only once the coordinator has; if the coordinator
//!   refuses (the name was taken meanwhile) it aborts everywhere; if the coordinator does
//!   not answer, the outcome is the coordinator's to tell, and the client aborts nothing;
//! - a server holding a prepared write that is not the coordinator, once the client is
//!   late, asks the coordinator: committed, it commits too (rolls forward); committed
//!   without it (its prepare went unanswered and the client went on with the others),
//!   or unknown there (aborted, or never prepared, or since removed), it aborts (rolls
//!   back); still pending or unreachable, it waits and asks again;
//! - the coordinator holding a prepared write that no client commits within the timeout
//!   (the client died after `prepare`) aborts it: the commit point is its to pass;
//! - a staged write that is not prepared and sees no activity for the timeout (its client
//!   died part way) is aborted; one a server finds at start is removed at once (it cannot
//!   have been prepared after the crash).
//!
//! Nothing here does I/O: the server's janitor feeds it what it sees and does what it says.

use crate::ids::NodeId;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a server waits, by default, for a write's client before it acts alone.
pub const TXN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);

/// A participant asks the coordinator once its prepared write has waited this long (or
/// half the timeout, if shorter): a live client commits everyone within moments.
pub const ASK_AFTER: Duration = Duration::from_secs(5);

/// Where a write stands on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Staged; data may still be arriving.
    Staged,
    /// Prepared, with `coordinator` named by the client.
    Prepared { coordinator: NodeId },
}

/// What the coordinator said of a write (`TxnStatus` on the wire; a server answers one of
/// the first four).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It renamed the write's folder into `datasets/`.
    Committed,
    /// It still stages or holds the write, prepared or not.
    Pending,
    /// It committed the write without the asking server: that server's prepare went
    /// unanswered, and the client committed on the others (a degraded write).
    Excluded,
    /// It knows nothing of it: aborted, never prepared there, or since removed.
    Unknown,
    /// It could not be reached.
    Unreachable,
}

/// The coordinator's verdict to `asker` on a write it committed on `members` (empty: a
/// write prepared by a build that did not name them, committed on every server that staged
/// it): a server left out (its prepare went unanswered) hears `Excluded`, so it rolls back.
pub fn committed_verdict(members: &[NodeId], asker: Option<NodeId>) -> Verdict {
    match asker {
        Some(a) if !members.is_empty() && !members.contains(&a) => Verdict::Excluded,
        _ => Verdict::Committed,
    }
}

/// What the server should do with a write now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave it.
    Wait,
    /// Ask the coordinator, then decide again with its verdict.
    Ask(NodeId),
    /// Commit it here.
    RollForward,
    /// Abort it here.
    RollBack,
}

/// The rule for one write on server `me`: `idle` is how long since it last saw activity
/// (a block written, its prepare), `verdict` the coordinator's answer if one was asked.
pub fn decide(me: NodeId, phase: Phase, idle: Duration, timeout: Duration, verdict: Option<Verdict>) -> Action {
    match phase {
        // A participant's prepared write is the coordinator's to decide.
        Phase::Prepared { coordinator } if coordinator != me => {
            if idle < ASK_AFTER.min(timeout / 2) {
                return Action::Wait;
            }
            match verdict {
                None => Action::Ask(coordinator),
                Some(Verdict::Committed) => Action::RollForward,
                Some(Verdict::Excluded | Verdict::Unknown) => Action::RollBack,
                Some(Verdict::Pending | Verdict::Unreachable) => Action::Wait,
            }
        }
        // Unprepared anywhere, or prepared here as the coordinator: this server acts alone
        // once its client has been gone for the timeout.
        _ if idle >= timeout => Action::RollBack,
        _ => Action::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = TXN_TIMEOUT_DEFAULT;
    const ME: NodeId = NodeId(1);
    const COORD: NodeId = NodeId(0);

    fn prepared(coordinator: NodeId) -> Phase {
        Phase::Prepared { coordinator }
    }

    #[test]
    fn a_staged_write_is_rolled_back_only_once_idle_for_the_timeout() {
        assert_eq!(decide(ME, Phase::Staged, T - Duration::from_millis(1), T, None), Action::Wait);
        assert_eq!(decide(ME, Phase::Staged, T, T, None), Action::RollBack);
        // A coordinator's verdict has no say over an unprepared write.
        assert_eq!(decide(ME, Phase::Staged, Duration::ZERO, T, Some(Verdict::Committed)), Action::Wait);
    }

    #[test]
    fn the_coordinator_rolls_back_a_prepared_write_no_client_commits() {
        assert_eq!(decide(COORD, prepared(COORD), T / 2, T, None), Action::Wait);
        assert_eq!(decide(COORD, prepared(COORD), T, T, None), Action::RollBack);
    }

    #[test]
    fn a_participant_follows_the_coordinator() {
        let late = ASK_AFTER;
        assert_eq!(decide(ME, prepared(COORD), late / 2, T, None), Action::Wait, "the client is not late yet");
        assert_eq!(decide(ME, prepared(COORD), late, T, None), Action::Ask(COORD));
        assert_eq!(decide(ME, prepared(COORD), late, T, Some(Verdict::Committed)), Action::RollForward);
        assert_eq!(decide(ME, prepared(COORD), late, T, Some(Verdict::Unknown)), Action::RollBack);
        // Committed on the others after this server's prepare went unanswered: its copy is
        // not the dataset's, and rolling it forward would hold a manifest no one else has.
        assert_eq!(decide(ME, prepared(COORD), late, T, Some(Verdict::Excluded)), Action::RollBack);
        assert_eq!(decide(ME, prepared(COORD), late, T, Some(Verdict::Pending)), Action::Wait);
        // Never on its own, however long: only the coordinator passes the commit point.
        assert_eq!(decide(ME, prepared(COORD), T * 100, T, Some(Verdict::Unreachable)), Action::Wait);
    }

    #[test]
    fn a_server_left_out_of_the_commit_hears_excluded() {
        let members = [NodeId(0), NodeId(1), NodeId(3)];
        assert_eq!(committed_verdict(&members, Some(NodeId(1))), Verdict::Committed);
        assert_eq!(committed_verdict(&members, Some(NodeId(2))), Verdict::Excluded);
        assert_eq!(committed_verdict(&members, None), Verdict::Committed, "an asker that does not say who it is");
        assert_eq!(committed_verdict(&[], Some(NodeId(2))), Verdict::Committed, "members not recorded: all");
    }

    #[test]
    fn a_short_timeout_makes_participants_ask_sooner() {
        let t = Duration::from_secs(2);
        assert_eq!(decide(ME, prepared(COORD), Duration::from_secs(1), t, None), Action::Ask(COORD));
    }
}
