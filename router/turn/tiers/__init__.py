"""The decider's tier actions, one module each, over the turn's record (base.TurnBase).

- ``base``: the turn's record and the little every action does (a state move, a reply, a decision, the result);
- ``tickets``: L3 and the handoff tickets (their context package), and a conversation a person holds;
- ``answers``: L1 from the knowledge base (an offer of the task it covers), L2 drafts, small talk and clarify;
- ``workflows``: the turn's one call into the workflow engine and what the router asks around it.

Each class builds on the one before it (TurnBase <- Tickets <- Answers <- Workflows); the decider's turn is the
last of them plus the routing order (router.turn.plan). The collaborators are reached through typed ports
(router.turn.ports).
"""
