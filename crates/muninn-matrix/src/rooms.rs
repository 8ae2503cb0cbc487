//! Which rooms an account listens and speaks in, and what each is to the Mind: a public room it
//! was configured with (named as the Mind names it), or a direct chat.
//!
//! A room is direct when the account's `m.direct` account data lists it, or when exactly two
//! members are in it (the account and one other) and it is not a configured room. An invite to
//! a direct chat (`is_direct` on the invite) that the account accepts is added to its
//! `m.direct`, as a client does, so the classification survives restarts.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// What a room is to the Mind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomKind {
    /// A configured public room; `name` is how the Mind names it (its deliveries' `room`, its
    /// replies' `say[].room`).
    Public {
        /// The configured name.
        name: String,
    },
    /// A direct chat; its deliveries' `room` is the room id.
    Direct,
}

/// The account's rooms, shared by its sync loop (which learns them) and its sender (which
/// resolves a reply's room).
#[derive(Debug, Clone, Default)]
pub struct Directory {
    /// Configured rooms: room id → configured name.
    public: HashMap<String, String>,
    /// Configured rooms: configured name → room id.
    by_name: HashMap<String, String>,
    /// `m.direct`: the other user → their direct rooms with the account.
    direct: BTreeMap<String, Vec<String>>,
    /// Joined member counts of rooms that are neither configured nor in `m.direct`.
    members: HashMap<String, u64>,
    /// Rooms upgraded since the account opened: old room id → its replacement's.
    upgraded: HashMap<String, String>,
}

impl Directory {
    /// Records a configured room's id.
    pub fn add_public(&mut self, name: &str, room_id: &str) {
        self.public.insert(room_id.to_owned(), name.to_owned());
        self.by_name.insert(name.to_owned(), room_id.to_owned());
    }

    /// Replaces the direct rooms with `m.direct`'s content (`{user: [room, …]}`).
    pub fn set_direct(&mut self, content: &Value) {
        self.direct = content
            .as_object()
            .map(|users| {
                users
                    .iter()
                    .map(|(user, rooms)| {
                        let rooms = rooms
                            .as_array()
                            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned))
                            .into_iter()
                            .flatten()
                            .collect();
                        (user.clone(), rooms)
                    })
                    .collect()
            })
            .unwrap_or_default();
    }

    /// Adds a direct room with `user`; returns the new `m.direct` content if it changed.
    pub fn add_direct(&mut self, user: &str, room_id: &str) -> Option<Value> {
        let rooms = self.direct.entry(user.to_owned()).or_default();
        if rooms.iter().any(|r| r == room_id) {
            return None;
        }
        rooms.push(room_id.to_owned());
        Some(serde_json::json!(self.direct))
    }

    /// Records that `old` was upgraded to `new`: a configured room's name now names the
    /// replacement (the old id keeps the name, for what is still read from it), a direct chat's
    /// replacement is direct with the same person, and a reply to the old room goes to the new.
    /// Returns the new `m.direct` content if it changed.
    pub fn follow_upgrade(&mut self, old: &str, new: &str) -> Option<Value> {
        self.upgraded.insert(old.to_owned(), new.to_owned());
        if let Some(name) = self.public.get(old).cloned() {
            self.add_public(&name, new);
            return None;
        }
        if let Some(&joined) = self.members.get(old) {
            self.members.entry(new.to_owned()).or_insert(joined);
        }
        let with: Vec<String> = self
            .direct
            .iter()
            .filter(|(_, rooms)| rooms.iter().any(|r| r == old))
            .map(|(user, _)| user.clone())
            .collect();
        let mut changed = None;
        for user in with {
            changed = self.add_direct(&user, new).or(changed);
        }
        changed
    }

    /// Records how many members have joined a room (from a sync's summary or a lookup).
    pub fn set_members(&mut self, room_id: &str, joined: u64) {
        self.members.insert(room_id.to_owned(), joined);
    }

    /// Whether the room's member count is still to be looked up before it can be classified.
    pub fn needs_members(&self, room_id: &str) -> bool {
        !self.public.contains_key(room_id)
            && !self.is_in_m_direct(room_id)
            && !self.members.contains_key(room_id)
    }

    fn is_in_m_direct(&self, room_id: &str) -> bool {
        self.direct.values().flatten().any(|r| r == room_id)
    }

    /// What the room is, or `None` if the account does not listen there.
    pub fn kind(&self, room_id: &str) -> Option<RoomKind> {
        if let Some(name) = self.public.get(room_id) {
            return Some(RoomKind::Public { name: name.clone() });
        }
        if self.is_in_m_direct(room_id) || self.members.get(room_id) == Some(&2) {
            return Some(RoomKind::Direct);
        }
        None
    }

    /// The room id a reply's room names: a configured room's name, a room id the account
    /// speaks in, or `@user` (their first direct room). `None`: not a room of this Mind.
    pub fn resolve(&self, room: &str) -> Option<String> {
        if let Some(id) = self.by_name.get(room) {
            return Some(id.clone());
        }
        let room_id = if room.starts_with('!') {
            self.kind(room).map(|_| room.to_owned())
        } else if room.starts_with('@') {
            self.direct.get(room).and_then(|r| r.first()).cloned()
        } else {
            None
        };
        room_id.map(|id| self.latest(id))
    }

    /// The room that replaced `room_id`, through every upgrade known (bounded: a cycle, which
    /// no homeserver makes, stops after as many steps as there are upgrades).
    fn latest(&self, mut room_id: String) -> String {
        for _ in 0..self.upgraded.len() {
            match self.upgraded.get(&room_id) {
                Some(next) => room_id = next.clone(),
                None => break,
            }
        }
        room_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rooms_are_public_direct_by_m_direct_or_by_two_members_else_ignored() {
        let mut d = Directory::default();
        d.add_public("#swarm", "!s:hs");
        d.set_direct(&json!({"@ann:hs": ["!dm:hs"], "@bob:hs": "not a list"}));
        d.set_members("!pair:hs", 2);
        d.set_members("!crowd:hs", 5);
        assert_eq!(
            d.kind("!s:hs"),
            Some(RoomKind::Public {
                name: "#swarm".into()
            })
        );
        assert_eq!(d.kind("!dm:hs"), Some(RoomKind::Direct));
        assert_eq!(d.kind("!pair:hs"), Some(RoomKind::Direct));
        assert_eq!(d.kind("!crowd:hs"), None);
        assert_eq!(d.kind("!unknown:hs"), None);
        assert!(d.needs_members("!unknown:hs"));
        assert!(!d.needs_members("!dm:hs") && !d.needs_members("!s:hs"));
        // Replies resolve by name, by room id, or by the other user of a DM.
        assert_eq!(d.resolve("#swarm").as_deref(), Some("!s:hs"));
        assert_eq!(d.resolve("!pair:hs").as_deref(), Some("!pair:hs"));
        assert_eq!(d.resolve("@ann:hs").as_deref(), Some("!dm:hs"));
        assert_eq!(d.resolve("!crowd:hs"), None);
        assert_eq!(d.resolve("#elsewhere"), None);
        assert_eq!(d.resolve("@carol:hs"), None);
        // Adding a DM changes m.direct once.
        assert_eq!(
            d.add_direct("@carol:hs", "!c:hs"),
            Some(json!({"@ann:hs": ["!dm:hs"], "@bob:hs": [], "@carol:hs": ["!c:hs"]}))
        );
        assert_eq!(d.add_direct("@carol:hs", "!c:hs"), None);
    }

    #[test]
    fn an_upgraded_room_is_followed_by_name_by_id_and_by_person() {
        let mut d = Directory::default();
        d.add_public("#swarm", "!s:hs");
        d.set_direct(&json!({"@ann:hs": ["!dm:hs"]}));
        assert_eq!(d.follow_upgrade("!s:hs", "!s2:hs"), None);
        assert_eq!(
            d.follow_upgrade("!dm:hs", "!dm2:hs"),
            Some(json!({"@ann:hs": ["!dm:hs", "!dm2:hs"]}))
        );
        assert_eq!(d.follow_upgrade("!s2:hs", "!s3:hs"), None);
        let swarm = Some(RoomKind::Public {
            name: "#swarm".into(),
        });
        assert_eq!((d.kind("!s:hs"), d.kind("!s3:hs")), (swarm.clone(), swarm));
        assert_eq!(d.kind("!dm2:hs"), Some(RoomKind::Direct));
        assert_eq!(d.resolve("#swarm").as_deref(), Some("!s3:hs"));
        assert_eq!(d.resolve("!s:hs").as_deref(), Some("!s3:hs"));
        assert_eq!(d.resolve("!dm:hs").as_deref(), Some("!dm2:hs"));
        assert_eq!(d.resolve("@ann:hs").as_deref(), Some("!dm2:hs"));
    }
}
