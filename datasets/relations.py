"""A heterogeneous graph's relation (source type, name, destination type) and its name in files and messages."""

from __future__ import annotations

Relation = tuple[str, str, str]  # (source type, relation name, destination type), PyG's edge type


def relation_name(relation: Relation) -> str:
    """ "src__rel__dst": a relation's name in files and messages."""
    return "__".join(relation)
