"""People, their API tokens, and the audit log of who did what (issue 49).

Low in the layers (just above compozy_base): sessions, tasks and attention record actors with `accounts.actor`;
the API guard checks a token's scopes and workspaces with `accounts.services`. Its rows live in the catalog, so
every node of a cluster honours the same people, tokens and revocations.
"""
