"""The claim and task tools of ``muster mcp``: names, descriptions (they state the rules an agent must know) and
input schemas (their handlers: ``claim_handlers``)."""

from __future__ import annotations

from typing import Any

from muster_mesh.patterns import MAX_PATTERNS

CLAIM = "claim_paths"
RELEASE = "release_paths"
CHECK = "check_paths"
TASK_POST = "task_post"
TASK_CLAIM = "task_claim"
TASK_UPDATE = "task_update"
CLAIM_TOOLS = (CLAIM, RELEASE, CHECK, TASK_POST, TASK_CLAIM, TASK_UPDATE)

CONFIRM = {"type": "boolean", "description": "Must be true to act; otherwise the answer is a preview."}
PATHS = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 1,
    "maxItems": MAX_PATTERNS,
    "description": "Gitignore-style globs relative to the repository's root: src/store/**, README.md, *.sql, docs/.",
}

CLAIM_ABOUT = (
    "Claim paths of your repository before you edit them, so that other agents know and their edits are refused. "
    "A claim lives exactly as long as your mesh presence: it ends when your lease expires, when you check out, or "
    "when you release it; there is no separate timeout. Exclusive (default) conflicts with any overlapping claim of "
    "another agent; shared (exclusive: false) conflicts only with exclusive ones. Patterns may not be absolute, "
    "contain .., be empty or start with !. The answer lists what was granted and, for the rest, who holds what and "
    "why: message them (agent_send) rather than editing around them. Without confirm: true, a preview."
)
RELEASE_ABOUT = (
    "Release your path claims by id or by the pattern as claimed (all of them when neither is given). Release what "
    "you no longer need as soon as you are done, so others can proceed. Without confirm: true, a preview."
)
CHECK_ABOUT = (
    "For concrete paths of a repository (no globs), the agent other than you holding each exclusively, with its "
    "pattern and reason. Check before editing a file you did not claim."
)
TASK_POST_ABOUT = (
    "Post a task for exactly one of: an agent (to), a role, a repo or a capability (cap). Exactly one agent will "
    "claim it; you get a mesh message in the task's thread when it is claimed, done or failed. Higher priority "
    "(0-100) first. Without confirm: true, a preview."
)
TASK_CLAIM_ABOUT = (
    "Take your next task: the open one of the highest priority, oldest first, addressed to you directly or to your "
    "role, repo or a capability (narrow with role/repo/cap). Exactly one agent gets each task. The answer carries "
    "its fencing token: pass it to task_update. You hold the task while your mesh presence lives; if your lease "
    "ends, the task goes back to open for another agent and your token stops working. Without confirm: true, a "
    "preview."
)
TASK_UPDATE_ABOUT = (
    "Finish a task you claimed: action done (with result), fail (with reason) or release (give it back open), with "
    "the token task_claim gave you. A stale token (your claim ended) is refused with stale_claim: do not retry, "
    "claim another task. Without confirm: true, a preview."
)

SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    CLAIM: (
        CLAIM_ABOUT,
        {
            "type": "object",
            "properties": {
                "paths": PATHS,
                "exclusive": {"type": "boolean", "description": "Default true."},
                "reason": {"type": "string", "description": "Why you hold them (shown to whoever meets the claim)."},
                "repo": {"type": "string", "description": "Default: the repo you checked in with."},
                "confirm": CONFIRM,
            },
            "required": ["paths"],
            "additionalProperties": False,
        },
    ),
    RELEASE: (
        RELEASE_ABOUT,
        {
            "type": "object",
            "properties": {
                "ids": {"type": "array", "items": {"type": "string"}},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "Patterns as claimed."},
                "repo": {"type": "string"},
                "confirm": CONFIRM,
            },
            "additionalProperties": False,
        },
    ),
    CHECK: (
        CHECK_ABOUT,
        {
            "type": "object",
            "properties": {"repo": {"type": "string"}, "paths": {**PATHS, "description": "Concrete paths."}},
            "required": ["repo", "paths"],
            "additionalProperties": False,
        },
    ),
    TASK_POST: (
        TASK_POST_ABOUT,
        {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "body": {"type": "string"},
                "to": {"type": "string"},
                "role": {"type": "string"},
                "repo": {"type": "string"},
                "cap": {"type": "string"},
                "priority": {"type": "integer", "minimum": 0, "maximum": 100},
                "confirm": CONFIRM,
            },
            "required": ["title", "body"],
            "additionalProperties": False,
        },
    ),
    TASK_CLAIM: (
        TASK_CLAIM_ABOUT,
        {
            "type": "object",
            "properties": {
                "role": {"type": "string"},
                "repo": {"type": "string"},
                "cap": {"type": "string"},
                "confirm": CONFIRM,
            },
            "additionalProperties": False,
        },
    ),
    TASK_UPDATE: (
        TASK_UPDATE_ABOUT,
        {
            "type": "object",
            "properties": {
                "task_id": {"type": "string"},
                "action": {"type": "string", "enum": ["done", "fail", "release"]},
                "token": {"type": "integer", "minimum": 1},
                "text": {"type": "string", "description": "The result (done) or the reason (fail)."},
                "confirm": CONFIRM,
            },
            "required": ["task_id", "action", "token"],
            "additionalProperties": False,
        },
    ),
}
