"""Dispatch agents served over A2A: the one place that composes the dispatch capability with the a2a-sdk server side.

An A2A task is a dispatch run (task id = run id), its context is the conversation (workspace ``a2a/{agent}/{context}``
holds the runs of one context, the latest conversation of the context is continued). Every agent is its own ASGI
sub-application under ``/a2a/serve/{name}``.
"""
