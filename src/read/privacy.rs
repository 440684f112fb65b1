//! What a bundle for a channel may hold (PRD §9, P5: least privilege). The
//! filter runs before anything is scored, so what a channel must not see
//! never competes for a place.
//!
//! | bundle for | memory recorded in | sensitivities | preferences view |
//! |---|---|---|---|
//! | `private` | any channel | none, low, high | yes |
//! | `team` | team, agent, public | none, low, high | yes |
//! | `agent` | team, agent, public | none, low | yes |
//! | `public` | public | none, low | never |
//!
//! `secret` is never stored, so never loaded. Views (identity, rules, ...)
//! are documents a person curates for every channel: they are filtered by
//! sensitivity alone, and the preferences view never reaches a public
//! channel.

use serde::Serialize;

use crate::domain::event::{Channel, Sensitivity};

/// The view that holds a person's preferences (PRD §9.1).
pub const PREFERENCES_VIEW: &str = "preferences";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Visibility {
    pub channel: Channel,
}

/// What `provenance.filters` reports.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Filters {
    #[schema(value_type = Channel)]
    pub channel: &'static str,
    /// Memory recorded in these channels may be shown.
    #[schema(value_type = Vec<Channel>)]
    pub channels_allowed: Vec<&'static str>,
    #[schema(value_type = Vec<Sensitivity>)]
    pub sensitivity_allowed: Vec<&'static str>,
    /// Whether the `preferences` view may be shown.
    pub preferences_view: bool,
}

impl Visibility {
    pub fn new(channel: Channel) -> Self {
        Self { channel }
    }

    pub fn channels(self) -> &'static [Channel] {
        match self.channel {
            Channel::Private => &[
                Channel::Private,
                Channel::Team,
                Channel::Agent,
                Channel::Public,
            ],
            Channel::Team | Channel::Agent => &[Channel::Team, Channel::Agent, Channel::Public],
            Channel::Public => &[Channel::Public],
        }
    }

    pub fn sensitivities(self) -> &'static [Sensitivity] {
        match self.channel {
            Channel::Private | Channel::Team => {
                &[Sensitivity::None, Sensitivity::Low, Sensitivity::High]
            }
            Channel::Agent | Channel::Public => &[Sensitivity::None, Sensitivity::Low],
        }
    }

    pub fn channel_names(self) -> Vec<&'static str> {
        self.channels().iter().map(|c| c.as_str()).collect()
    }

    pub fn sensitivity_names(self) -> Vec<&'static str> {
        self.sensitivities().iter().map(|s| s.as_str()).collect()
    }

    fn sensitivity_allowed(self, sensitivity: &str) -> bool {
        self.sensitivities()
            .iter()
            .any(|s| s.as_str() == sensitivity)
    }

    /// Memory recorded in `channel` with `sensitivity`: chunks, decisions,
    /// tasks, handoffs, recent events.
    pub fn allows(self, channel: &str, sensitivity: &str) -> bool {
        self.channels().iter().any(|c| c.as_str() == channel)
            && self.sensitivity_allowed(sensitivity)
    }

    pub fn allows_view(self, view: &str, sensitivity: &str) -> bool {
        if self.channel == Channel::Public && view == PREFERENCES_VIEW {
            return false;
        }
        self.sensitivity_allowed(sensitivity)
    }

    pub fn filters(self) -> Filters {
        Filters {
            channel: self.channel.as_str(),
            channels_allowed: self.channel_names(),
            sensitivity_allowed: self.sensitivity_names(),
            preferences_view: self.channel != Channel::Public,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_gets_public_low_sensitivity_memory_only() {
        let public = Visibility::new(Channel::Public);
        assert!(public.allows("public", "low"));
        assert!(!public.allows("public", "high"));
        assert!(
            !public.allows("private", "none"),
            "private memory stays private"
        );
        assert!(!public.allows("team", "none"));
        assert!(!public.allows_view("preferences", "none"));
        assert!(public.allows_view("rules", "none"));
        assert!(!public.allows_view("rules", "high"));
    }

    #[test]
    fn private_gets_everything_but_secrets() {
        let private = Visibility::new(Channel::Private);
        for channel in ["private", "team", "agent", "public"] {
            assert!(private.allows(channel, "high"));
            assert!(!private.allows(channel, "secret"));
        }
        assert!(private.allows_view("preferences", "high"));
    }

    #[test]
    fn team_and_agent_never_see_private_conversations() {
        let team = Visibility::new(Channel::Team);
        let agent = Visibility::new(Channel::Agent);
        assert!(!team.allows("private", "none"));
        assert!(team.allows("agent", "high"));
        assert!(!agent.allows("private", "none"));
        assert!(
            !agent.allows("team", "high"),
            "agent channels get none/low only"
        );
        assert!(agent.allows("team", "low"));
    }
}
