//! Failure detection, without I/O: what the supervisor knows of each VM (its QEMU, its
//! heartbeats) in, what to do out. The supervisor calls [`decide`] every tick and on
//! every event; the tests feed it synthetic heartbeats.

use std::time::{Duration, Instant};

use holdfast_replication::wire::{Mode, Role, StandbyState, Status};

/// What the supervisor knows of one VM.
#[derive(Clone, Debug, Default)]
pub struct NodeHealth {
    /// Its QEMU has exited (or was fenced).
    pub gone: bool,
    /// When its newest heartbeat arrived, since it (re)started: a VM is judged by the
    /// silence of its heartbeats only once it has sent one, so that a boot (or the restart
    /// of a promotion) is not taken for a failure. Until then only its QEMU's exit counts.
    pub heard_at: Option<Instant>,
    pub status: Option<Status>,
}

impl NodeHealth {
    /// Why the VM is failed, or `None` while it is not.
    pub fn failure(&self, now: Instant, heartbeat_timeout: Duration) -> Option<String> {
        if self.gone {
            return Some("its QEMU exited".into());
        }
        let heard_at = self.heard_at?;
        let silence = now.saturating_duration_since(heard_at);
        (silence > heartbeat_timeout).then(|| format!("no heartbeat for {} ms", silence.as_millis()))
    }

    /// Whether it is a standby that says it holds a whole copy it can start from.
    pub fn consistent_standby(&self) -> bool {
        self.status
            .is_some_and(|status| status.role == Role::Standby && status.standby_state == StandbyState::Consistent)
    }
}

/// What to do when the standby is lost while the primary replicates synchronously.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StandbyLoss {
    /// Tell the primary to acknowledge without the standby (Degrade), and say so
    Degrade,
    /// Let the primary's commits wait until the standby is back, and say so
    Wait,
}

#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub heartbeat_timeout: Duration,
    pub on_standby_loss: StandbyLoss,
}

/// What [`decide`] asks the supervisor to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing new.
    Nothing,
    /// The primary failed and the standby can take over: fence the primary, then promote.
    FenceAndPromote { reason: String },
    /// The primary failed and the standby cannot take over: say why, once.
    RefusePromotion { reason: String },
    /// The standby failed: tell the primary to go on without it (synchronous mode,
    /// `--on-standby-loss degrade`), and say so.
    Degrade { reason: String },
    /// The standby failed and nothing is to be sent: say what it means, once.
    ReportStandbyLoss { reason: String },
}

/// What the supervisor has already done about the current failure, so that each is acted
/// on once. Cleared when the pair is healthy again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Episode {
    pub primary_reported: bool,
    pub standby_reported: bool,
}

/// What to do now, given the primary and the standby (`None`: the pair has none, as after a
/// failover until a rejoin).
pub fn decide(
    primary: &NodeHealth,
    standby: Option<&NodeHealth>,
    mode: Mode,
    policy: Policy,
    episode: &mut Episode,
    now: Instant,
) -> Action {
    let timeout = policy.heartbeat_timeout;
    if let Some(why) = primary.failure(now, timeout) {
        let Some(standby) = standby else {
            return once(&mut episode.primary_reported, || Action::RefusePromotion {
                reason: format!("the primary failed ({why}) and the pair has no standby"),
            });
        };
        if let Some(standby_why) = standby.failure(now, timeout) {
            return once(&mut episode.primary_reported, || Action::RefusePromotion {
                reason: format!("the primary failed ({why}) and so did the standby ({standby_why})"),
            });
        }
        if !standby.consistent_standby() {
            let state = match standby.status {
                None => "has not said what it holds (no heartbeat yet)".to_owned(),
                Some(status) if status.role != Role::Standby => "is not a standby".to_owned(),
                Some(status) => format!("holds no whole copy yet ({})", standby_state_name(status.standby_state)),
            };
            return once(&mut episode.primary_reported, || Action::RefusePromotion {
                reason: format!("the primary failed ({why}) but the standby {state}: promoting it would lose data"),
            });
        }
        // The standby's own word is not enough in a synchronous mode: a primary that last
        // said it was degraded, or that the standby was not in step with it, acknowledged
        // commits the standby may lack.
        if mode != Mode::Asynchronous
            && let Some(last) = primary.status
            && (last.degraded || last.standby_state != StandbyState::Consistent)
        {
            let said = if last.degraded { "it was degraded".to_owned() } else { format!("its standby was {}", standby_state_name(last.standby_state)) };
            return once(&mut episode.primary_reported, || Action::RefusePromotion {
                reason: format!("the primary failed ({why}) and last said {said}: it acknowledged commits the standby may lack, promoting it would lose them"),
            });
        }
        // Not once: a promotion changes the pair, and the supervisor stops asking.
        return Action::FenceAndPromote { reason: format!("the primary failed: {why}") };
    }
    episode.primary_reported = false;
    let Some(standby) = standby else {
        return Action::Nothing;
    };
    let Some(why) = standby.failure(now, timeout) else {
        episode.standby_reported = false;
        return Action::Nothing;
    };
    let reason = format!("the standby failed ({why})");
    once(&mut episode.standby_reported, || match (mode, policy.on_standby_loss) {
        (Mode::Asynchronous, _) => Action::ReportStandbyLoss {
            reason: format!("{reason}: the primary goes on asynchronously, nothing replicated"),
        },
        (_, StandbyLoss::Degrade) => Action::Degrade {
            reason: format!("{reason}: the primary is told to acknowledge without it (DEGRADED)"),
        },
        (_, StandbyLoss::Wait) => Action::ReportStandbyLoss {
            reason: format!("{reason}: synchronous commits wait until it is back (--on-standby-loss wait)"),
        },
    })
}

fn once(reported: &mut bool, action: impl FnOnce() -> Action) -> Action {
    if *reported {
        return Action::Nothing;
    }
    *reported = true;
    action()
}

pub fn standby_state_name(state: StandbyState) -> &'static str {
    match state {
        StandbyState::Empty => "empty",
        StandbyState::Copying => "copying",
        StandbyState::Consistent => "consistent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(role: Role, standby_state: StandbyState) -> Status {
        Status {
            role,
            term: 1,
            checkpoint_generation: 4,
            journal_ticket_next: 100,
            mode: Mode::SynchronousDurable,
            sequence: 10,
            received: 10,
            durable: 10,
            lag_bytes: 0,
            lag_ms: 0,
            standby_state,
            degraded: false,
            standby_heard: true,
            fenced: false,
        }
    }

    fn heard(role: Role, state: StandbyState, at: Instant) -> NodeHealth {
        NodeHealth { gone: false, heard_at: Some(at), status: Some(status(role, state)) }
    }

    const POLICY: Policy = Policy { heartbeat_timeout: Duration::from_millis(300), on_standby_loss: StandbyLoss::Degrade };

    #[test]
    fn heartbeats_within_the_timeout_are_health() {
        let start = Instant::now();
        let primary = heard(Role::Primary, StandbyState::Consistent, start);
        let standby = heard(Role::Standby, StandbyState::Consistent, start);
        let mut episode = Episode::default();
        let now = start + Duration::from_millis(250);
        assert_eq!(decide(&primary, Some(&standby), Mode::SynchronousDurable, POLICY, &mut episode, now), Action::Nothing);
    }

    #[test]
    fn a_silent_primary_with_a_consistent_standby_is_fenced_and_the_standby_promoted() {
        let start = Instant::now();
        let primary = heard(Role::Primary, StandbyState::Consistent, start);
        let standby = heard(Role::Standby, StandbyState::Consistent, start + Duration::from_millis(300));
        let mut episode = Episode::default();
        let action = decide(&primary, Some(&standby), Mode::SynchronousDurable, POLICY, &mut episode, start + Duration::from_millis(350));
        assert_eq!(action, Action::FenceAndPromote { reason: "the primary failed: no heartbeat for 350 ms".into() });
    }

    #[test]
    fn a_standby_the_primary_last_called_out_of_step_or_degraded_is_not_promoted() {
        let start = Instant::now();
        let standby = heard(Role::Standby, StandbyState::Consistent, start + Duration::from_millis(300));
        let now = start + Duration::from_millis(350);
        for last in [
            Status { degraded: true, standby_state: StandbyState::Empty, ..status(Role::Primary, StandbyState::Empty) },
            status(Role::Primary, StandbyState::Copying),
        ] {
            let primary = NodeHealth { gone: false, heard_at: Some(start), status: Some(last) };
            let mut episode = Episode::default();
            let action = decide(&primary, Some(&standby), Mode::SynchronousDurable, POLICY, &mut episode, now);
            assert!(matches!(&action, Action::RefusePromotion { reason } if reason.contains("would lose them")), "{action:?}");
            // Asynchronously a consistent standby is taken as it is: the mode accepts the lag.
            let mut episode = Episode::default();
            let action = decide(&primary, Some(&standby), Mode::Asynchronous, POLICY, &mut episode, now);
            assert!(matches!(action, Action::FenceAndPromote { .. }), "{action:?}");
        }
    }

    #[test]
    fn a_primary_whose_qemu_exited_fails_at_once_and_one_not_yet_heard_does_not() {
        let start = Instant::now();
        let standby = heard(Role::Standby, StandbyState::Consistent, start);
        let booting = NodeHealth::default();
        let mut episode = Episode::default();
        let later = start + Duration::from_secs(60);
        let standby_later = heard(Role::Standby, StandbyState::Consistent, later);
        assert_eq!(decide(&booting, Some(&standby_later), Mode::Asynchronous, POLICY, &mut episode, later), Action::Nothing);
        let gone = NodeHealth { gone: true, ..NodeHealth::default() };
        assert!(matches!(decide(&gone, Some(&standby), Mode::Asynchronous, POLICY, &mut episode, start), Action::FenceAndPromote { .. }));
    }

    #[test]
    fn a_standby_without_a_whole_copy_is_not_promoted_and_that_is_said_once() {
        let start = Instant::now();
        let gone = NodeHealth { gone: true, ..NodeHealth::default() };
        let copying = heard(Role::Standby, StandbyState::Copying, start);
        let mut episode = Episode::default();
        let action = decide(&gone, Some(&copying), Mode::SynchronousDurable, POLICY, &mut episode, start);
        let Action::RefusePromotion { reason } = action else { panic!("{action:?}") };
        assert!(reason.contains("holds no whole copy yet (copying)"), "{reason}");
        assert_eq!(decide(&gone, Some(&copying), Mode::SynchronousDurable, POLICY, &mut episode, start), Action::Nothing);
        let silent_standby = heard(Role::Standby, StandbyState::Consistent, start);
        let mut episode = Episode::default();
        let later = start + Duration::from_secs(1);
        let action = decide(&gone, Some(&silent_standby), Mode::SynchronousDurable, POLICY, &mut episode, later);
        assert!(matches!(action, Action::RefusePromotion { reason } if reason.contains("and so did the standby")));
    }

    #[test]
    fn a_lost_standby_degrades_a_synchronous_primary_once_and_again_after_it_came_back() {
        let start = Instant::now();
        let later = start + Duration::from_secs(1);
        let primary = heard(Role::Primary, StandbyState::Consistent, later);
        let standby = heard(Role::Standby, StandbyState::Consistent, start);
        let mut episode = Episode::default();
        let action = decide(&primary, Some(&standby), Mode::SynchronousReceived, POLICY, &mut episode, later);
        assert!(matches!(&action, Action::Degrade { reason } if reason.contains("DEGRADED")), "{action:?}");
        assert_eq!(decide(&primary, Some(&standby), Mode::SynchronousReceived, POLICY, &mut episode, later), Action::Nothing);
        let back = heard(Role::Standby, StandbyState::Consistent, later);
        assert_eq!(decide(&primary, Some(&back), Mode::SynchronousReceived, POLICY, &mut episode, later), Action::Nothing);
        let even_later = later + Duration::from_secs(1);
        let primary = heard(Role::Primary, StandbyState::Consistent, even_later);
        assert!(matches!(decide(&primary, Some(&back), Mode::SynchronousReceived, POLICY, &mut episode, even_later), Action::Degrade { .. }));
    }

    #[test]
    fn a_lost_standby_is_reported_not_degraded_when_asynchronous_or_told_to_wait() {
        let start = Instant::now();
        let later = start + Duration::from_secs(1);
        let primary = heard(Role::Primary, StandbyState::Consistent, later);
        let standby = NodeHealth { gone: true, ..heard(Role::Standby, StandbyState::Consistent, later) };
        let mut episode = Episode::default();
        assert!(matches!(decide(&primary, Some(&standby), Mode::Asynchronous, POLICY, &mut episode, later), Action::ReportStandbyLoss { .. }));
        let wait = Policy { on_standby_loss: StandbyLoss::Wait, ..POLICY };
        let mut episode = Episode::default();
        let action = decide(&primary, Some(&standby), Mode::SynchronousDurable, wait, &mut episode, later);
        assert!(matches!(&action, Action::ReportStandbyLoss { reason } if reason.contains("wait")), "{action:?}");
    }

    #[test]
    fn a_primary_alone_that_fails_is_reported_once() {
        let gone = NodeHealth { gone: true, ..NodeHealth::default() };
        let mut episode = Episode::default();
        let now = Instant::now();
        assert!(matches!(decide(&gone, None, Mode::Asynchronous, POLICY, &mut episode, now), Action::RefusePromotion { .. }));
        assert_eq!(decide(&gone, None, Mode::Asynchronous, POLICY, &mut episode, now), Action::Nothing);
    }
}
