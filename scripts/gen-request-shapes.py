#!/usr/bin/env python3
"""Generates protocol/src/shape/generated.rs: the wire shape (field types by
version) of the Kafka request bodies Strom may decode, read from the
`kafka-protocol` crate's generated message sources, so that
`protocol::shape` walks a request exactly as the crate will decode it.

Usage: scripts/gen-request-shapes.py [KAFKA_PROTOCOL_SRC_DIR]
(default: the kafka-protocol 0.18.0 sources in ~/.cargo/registry). Re-run it
when the crate is upgraded; `shape::tests` checks the result against the
crate's own encoder.
"""

import glob
import os
import re
import subprocess
import sys

# Api keys whose request shapes are generated: every API the broker serves
# or is likely to (groups, transactions, SASL, admin).
REQUESTS = {
    0: "produce_request", 1: "fetch_request", 2: "list_offsets_request",
    3: "metadata_request", 8: "offset_commit_request", 9: "offset_fetch_request",
    10: "find_coordinator_request", 11: "join_group_request",
    12: "heartbeat_request", 13: "leave_group_request", 14: "sync_group_request",
    15: "describe_groups_request", 16: "list_groups_request",
    17: "sasl_handshake_request", 18: "api_versions_request",
    19: "create_topics_request", 20: "delete_topics_request",
    21: "delete_records_request", 22: "init_producer_id_request",
    23: "offset_for_leader_epoch_request", 24: "add_partitions_to_txn_request",
    25: "add_offsets_to_txn_request", 26: "end_txn_request",
    27: "write_txn_markers_request", 28: "txn_offset_commit_request",
    29: "describe_acls_request", 30: "create_acls_request", 31: "delete_acls_request",
    32: "describe_configs_request", 33: "alter_configs_request",
    35: "describe_log_dirs_request", 36: "sasl_authenticate_request",
    37: "create_partitions_request", 42: "delete_groups_request",
    43: "elect_leaders_request",
    44: "incremental_alter_configs_request",
    45: "alter_partition_reassignments_request",
    46: "list_partition_reassignments_request", 47: "offset_delete_request",
    50: "describe_user_scram_credentials_request",
    51: "alter_user_scram_credentials_request",
    55: "describe_quorum_request",
    60: "describe_cluster_request", 61: "describe_producers_request",
    65: "describe_transactions_request", 66: "list_transactions_request",
    68: "consumer_group_heartbeat_request", 69: "consumer_group_describe_request",
    74: "list_config_resources_request", 75: "describe_topic_partitions_request",
    76: "share_group_heartbeat_request", 77: "share_group_describe_request",
    78: "share_fetch_request", 79: "share_acknowledge_request",
    80: "add_raft_voter_request", 81: "remove_raft_voter_request",
    84: "read_share_group_state_request", 85: "write_share_group_state_request",
    90: "describe_share_group_offsets_request",
    91: "alter_share_group_offsets_request",
    92: "delete_share_group_offsets_request",
}

SCALARS = {
    "Boolean": "Fixed(1)", "Int8": "Fixed(1)", "Int16": "Fixed(2)",
    "UInt16": "Fixed(2)", "Int32": "Fixed(4)", "Int64": "Fixed(8)",
    "Float64": "Fixed(8)", "Uuid": "Fixed(16)",
    "String": "Str", "CompactString": "CompactStr",
    "Bytes": "Bytes", "CompactBytes": "CompactBytes",
}
ELEMENT_BYTES = {"Int8": 1, "Int16": 2, "Int32": 4, "Int64": 8, "Uuid": 16}


def find_src():
    if len(sys.argv) > 1:
        return sys.argv[1]
    home = os.path.expanduser("~/.cargo/registry/src")
    found = glob.glob(os.path.join(home, "*", "kafka-protocol-0.18.0", "src"))
    if not found:
        sys.exit("kafka-protocol 0.18.0 sources not found; pass their src dir")
    return found[0]


def block(text, start):
    """The text of the brace block opening at or after `start`."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    raise ValueError("unbalanced braces")


def statement(text, start):
    """From `start` to the `;` that ends the statement (depth 0)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == ";" and depth == 0:
            return text[start:i], i + 1
    raise ValueError("no statement end")


def struct_field_types(text):
    """struct name -> {field name -> Rust type}"""
    result = {}
    for m in re.finditer(r"pub struct (\w+) \{", text):
        body = block(text, m.start())
        fields = {}
        for f in re.finditer(r"pub (\w+): ([^\n]+),\n", body):
            fields[f.group(1)] = f.group(2).strip()
        result[m.group(1)] = fields
    return result


def inner_struct(rust_type):
    t = rust_type
    for wrapper in ("Option<", "Vec<"):
        while t.startswith(wrapper):
            t = t[len(wrapper):-1]
    return t.split("::")[-1]


def condition_holds(cond, version):
    expr = cond.replace("&&", " and ").replace("||", " or ")
    return eval(expr, {}, {"version": version})


def select(expr, version):
    """The decoder expression an if/else chain picks at `version` (None:
    the field is absent, only a default value), following nested ifs."""
    expr = expr.strip()
    if not expr.startswith("if "):
        m = re.fullmatch(r"(types::.*?)\.decode\(buf\)\?;?", expr, re.S)
        return m.group(1).strip() if m else None
    rest = expr
    while rest.startswith("if "):
        brace = rest.index("{")
        cond = rest[3:brace].strip()
        body = block(rest, brace)
        if condition_holds(cond, version):
            return select(body, version)
        rest = rest[brace + len(body) + 2:].strip()
        if not rest.startswith("else"):
            return None
        rest = rest[4:].strip()
        if rest.startswith("{"):
            return select(block(rest, 0), version)
    return None


def kind(decoder, rust_type, structs_needed):
    decoder = re.sub(r"\s+", " ", decoder)
    m = re.fullmatch(r"types::(\w+)", decoder)
    if m and m.group(1) in SCALARS:
        return SCALARS[m.group(1)]
    m = re.fullmatch(r"types::(Compact)?Array\(types::(\w+)( \{ version \})?\)", decoder)
    if m:
        compact = bool(m.group(1))
        element = m.group(2)
        prefix = "CompactArray" if compact else "Array"
        if element == "Struct":
            name = inner_struct(rust_type)
            structs_needed.add(name)
            return f"{prefix}(&{const_name(name)})"
        if element in ELEMENT_BYTES:
            return f"{prefix}Of({ELEMENT_BYTES[element]})"
        if element in ("String", "CompactString"):
            return f"{prefix}OfStr"
    m = re.fullmatch(r"types::(Option)?Struct \{ version \}", decoder)
    if m:
        name = inner_struct(rust_type)
        structs_needed.add(name)
        return f"{'OptionStruct' if m.group(1) else 'Struct'}(&{const_name(name)})"
    raise ValueError(f"unknown decoder {decoder!r}")


PREFIX = [""]


def const_name(struct):
    """Nested struct names repeat across messages, so they carry the
    request's name as a prefix."""
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", struct).upper()
    if PREFIX[0] and name != PREFIX[0]:
        return PREFIX[0] + "__" + name
    return name


def parse_struct(text, name, field_types, structs_needed):
    m = re.search(r"impl Decodable for " + name + r" \{", text)
    body = block(text, m.start())
    vm = re.search(r"if version < (-?\d+) \|\| version > (\d+)", body)
    if vm is not None:
        vmin, vmax = int(vm.group(1)), int(vm.group(2))
    else:
        single = re.search(r"if version != (\d+) \{", body)
        if single is None:
            raise ValueError(f"no version range for {name}")
        vmin = vmax = int(single.group(1))
    flexible = re.search(r"if version >= (\d+) \{\s*let num_tagged_fields", body)
    flexible_since = None
    if flexible:
        flexible_since = int(flexible.group(1))
    elif "let num_tagged_fields" in body:
        flexible_since = vmin
    # Plain fields, in order, up to the tagged section.
    tagged_at = body.find("let mut unknown_tagged_fields")
    head = body[:tagged_at]
    fields = []
    for lm in re.finditer(r"\blet (mut )?(\w+) = ", head):
        expr, _ = statement(head, lm.end())
        fname = lm.group(2)
        if lm.group(1):
            continue  # a tagged field's default, filled in the tagged section
        rust_type = field_types.get(fname, "")
        per_version = []
        for v in range(vmin, vmax + 1):
            chosen = select(expr, v)
            per_version.append(
                None if chosen is None else kind(chosen, rust_type, structs_needed))
        fields.append((fname, per_version))
    # Known tagged fields.
    tags = []
    tail = body[tagged_at:]
    mt = re.search(r"match tag \{", tail)
    if mt:
        mbody = block(tail, mt.start())
        for am in re.finditer(r"\n\s*(\d+) => \{", mbody):
            arm = block(mbody, am.start() + len(am.group(0)) - 1)
            tag = int(am.group(1))
            dm = re.search(r"(\w+) = (types::[^;]*?)\.decode\(buf\)\?", arm, re.S)
            fname, decoder = dm.group(1), dm.group(2)
            gate = re.search(r"if version >= (\d+)", arm)
            since = int(gate.group(1)) if gate else vmin
            tags.append((tag, kind(decoder, field_types.get(fname, ""), structs_needed), since))
    return vmin, vmax, flexible_since, fields, tags


def ranges(per_version, vmin):
    """[(kind, since, until)] for contiguous versions with the same kind."""
    out = []
    for offset, k in enumerate(per_version):
        v = vmin + offset
        if k is None:
            continue
        if out and out[-1][0] == k and out[-1][2] == v - 1:
            out[-1] = (k, out[-1][1], v)
        else:
            out.append((k, v, v))
    return out


def main():
    src = find_src()
    out = [
        "//! Generated by `scripts/gen-request-shapes.py` from the `kafka-protocol`",
        "//! 0.18.0 message sources: the body shape of each request the broker may",
        "//! decode. Do not edit; re-run the script after upgrading the crate.",
        "",
        "#![allow(clippy::all)]",
        "",
        "use super::Kind::*;",
        "use super::{Field, Struct, Tagged};",
        "",
    ]
    top = []
    for api_key, module in sorted(REQUESTS.items()):
        path = os.path.join(src, "messages", module + ".rs")
        text = open(path).read()
        types = struct_field_types(text)
        root = "".join(p.capitalize() for p in module.split("_"))
        PREFIX[0] = ""
        PREFIX[0] = const_name(root)
        pending = [root]
        done = set()
        while pending:
            name = pending.pop()
            if name in done:
                continue
            done.add(name)
            needed = set()
            vmin, vmax, flex, fields, tags = parse_struct(text, name, types.get(name, {}), needed)
            pending.extend(sorted(needed - done))
            field_lines = []
            for fname, per_version in fields:
                for k, since, until in ranges(per_version, vmin):
                    field_lines.append(
                        f"        Field {{ kind: {k}, since: {since}, until: {until} }}, // {fname}")
            tag_lines = [
                f"        Tagged {{ tag: {tag}, kind: {k}, since: {since} }},"
                for tag, k, since in tags
            ]
            flex_text = "i16::MAX" if flex is None else str(flex)
            out.append(f"pub static {const_name(name)}: Struct = Struct {{")
            out.append(f"    versions: ({vmin}, {vmax}),")
            out.append(f"    flexible_since: {flex_text},")
            out.append("    fields: &[")
            out.extend(field_lines)
            out.append("    ],")
            out.append("    tags: &[")
            out.extend(tag_lines)
            out.append("    ],")
            out.append("};")
            out.append("")
        top.append((api_key, PREFIX[0]))
    out.append("/// The root struct of each request body, by api key.")
    out.append("pub fn request(api_key: i16) -> Option<&'static Struct> {")
    out.append("    Some(match api_key {")
    for api_key, name in top:
        out.append(f"        {api_key} => &{name},")
    out.append("        _ => return None,")
    out.append("    })")
    out.append("}")
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "protocol", "src", "shape", "generated.rs")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as f:
        f.write("\n".join(out) + "\n")
    subprocess.run(["rustfmt", "--edition", "2021", target], check=True)
    print(f"wrote {os.path.normpath(target)}: {len(top)} requests")


main()
