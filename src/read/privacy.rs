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
pub struct Visibility<'a> {
    pub channel: Channel,
    /// The agent the bundle is for: memory recorded in the `private`
    /// channel by another agent is not its to see. `None`: a tenant-wide
    /// operator's view, every agent's private memory included.
    pub agent: Option<&'a str>,
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

/// SQL over a row with `channel` and `agent_id` columns: whether the agent
/// bound as `$param` (NULL: an operator) may see it ([`Visibility::owner_allows`]).
pub fn owner_condition(param: usize) -> String {
    format!(
        "(channel <> 'private' OR agent_id IS NULL OR ${param}::text IS NULL OR agent_id = ${param})"
    )
}

/// [`owner_condition`] over the log's own rows (`events`): a handoff packet
/// is also the business of its sender, its receiver and operators only,
/// whatever its channel (a packet of an older version names its receiver
/// in its content alone).
pub fn event_row_condition(param: usize) -> String {
    format!(
        "(CASE WHEN kind = 'handoff'
               THEN ${param}::text IS NULL OR actor_id = ${param} OR agent_id = ${param}
                    OR content ->> 'to_agent' = ${param}
               ELSE {owner} END)",
        owner = owner_condition(param)
    )
}

/// SQL over a read-model row `row` (a decision, a task) owned by the agent
/// of the event at its `seq_column`: whether the agent bound as `$param`
/// (NULL: an operator) may see it ([`Visibility::owner_allows`]).
pub fn event_owner_condition(row: &str, seq_column: &str, param: usize) -> String {
    format!(
        "({row}.channel <> 'private' OR ${param}::text IS NULL
          OR coalesce((SELECT e.agent_id FROM public.events e
                        WHERE e.tenant_id = {row}.tenant_id AND e.seq = {row}.{seq_column}),
                      ${param}) = ${param})"
    )
}

/// Who may see a piece of memory: where it was recorded, how sensitive it
/// is, and the agent whose memory it is, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audience {
    pub channel: Channel,
    pub sensitivity: Sensitivity,
    pub owner: Option<String>,
}

impl<'a> Visibility<'a> {
    pub fn new(channel: Channel) -> Self {
        Self {
            channel,
            agent: None,
        }
    }

    /// The same channel, for `agent` (or for the operator with `None`).
    pub fn for_agent(self, agent: Option<&'a str>) -> Self {
        Self { agent, ..self }
    }

    /// Whether memory owned by `owner` may be seen, as far as agents go: an
    /// agent's private memory is its own; unowned private memory is the
    /// tenant's, shared by its agents; other channels are shared by the
    /// channel rules ([`Self::allows`]).
    pub fn owner_allows(self, channel: Channel, owner: Option<&str>) -> bool {
        channel != Channel::Private
            || owner.is_none()
            || self.agent.is_none()
            || owner == self.agent
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

    fn sensitivity_allowed(self, sensitivity: Sensitivity) -> bool {
        self.sensitivities().contains(&sensitivity)
    }

    /// Memory recorded in `channel` with `sensitivity`: chunks, decisions,
    /// tasks, handoffs, recent events.
    pub fn allows(self, channel: Channel, sensitivity: Sensitivity) -> bool {
        self.channels().contains(&channel) && self.sensitivity_allowed(sensitivity)
    }

    /// Whether memory recorded in `channel` with `sensitivity`, owned by
    /// `owner`, may be shown: by channel, sensitivity and owner
    /// ([`Self::allows`], [`Self::owner_allows`]).
    pub fn sees(self, channel: Channel, sensitivity: Sensitivity, owner: Option<&str>) -> bool {
        self.allows(channel, sensitivity) && self.owner_allows(channel, owner)
    }

    pub fn allows_view(self, view: &str, sensitivity: Sensitivity) -> bool {
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
    fn an_agents_private_memory_is_its_own_and_unowned_private_memory_is_shared() {
        let beta = Visibility::new(Channel::Private).for_agent(Some("beta"));
        assert!(!beta.owner_allows(Channel::Private, Some("alpha")));
        assert!(beta.owner_allows(Channel::Private, Some("beta")));
        assert!(beta.owner_allows(Channel::Private, None));
        assert!(beta.owner_allows(Channel::Team, Some("alpha")));
        let operator = Visibility::new(Channel::Private);
        assert!(operator.owner_allows(Channel::Private, Some("alpha")));
    }

    #[test]
    fn public_gets_public_low_sensitivity_memory_only() {
        let public = Visibility::new(Channel::Public);
        assert!(public.allows(Channel::Public, Sensitivity::Low));
        assert!(!public.allows(Channel::Public, Sensitivity::High));
        assert!(
            !public.allows(Channel::Private, Sensitivity::None),
            "private memory stays private"
        );
        assert!(!public.allows(Channel::Team, Sensitivity::None));
        assert!(!public.allows_view("preferences", Sensitivity::None));
        assert!(public.allows_view("rules", Sensitivity::None));
        assert!(!public.allows_view("rules", Sensitivity::High));
    }

    #[test]
    fn private_gets_everything_but_secrets() {
        let private = Visibility::new(Channel::Private);
        for channel in Channel::ALL {
            assert!(private.allows(*channel, Sensitivity::High));
            assert!(!private.allows(*channel, Sensitivity::Secret));
        }
        assert!(private.allows_view("preferences", Sensitivity::High));
    }

    #[test]
    fn team_and_agent_never_see_private_conversations() {
        let team = Visibility::new(Channel::Team);
        let agent = Visibility::new(Channel::Agent);
        assert!(!team.allows(Channel::Private, Sensitivity::None));
        assert!(team.allows(Channel::Agent, Sensitivity::High));
        assert!(!agent.allows(Channel::Private, Sensitivity::None));
        assert!(
            !agent.allows(Channel::Team, Sensitivity::High),
            "agent channels get none/low only"
        );
        assert!(agent.allows(Channel::Team, Sensitivity::Low));
    }
}
