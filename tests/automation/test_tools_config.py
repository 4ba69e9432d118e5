"""The tools file: the bundled one loads, and mistakes are reported with file, line and field."""

from __future__ import annotations

import pytest

from automation.tools.config import ToolConfigError, load_tools_file, parse_tools, to_specs

GOOD_TOOL = """\
  - name: lookup
    description: {zh: 查询, en: Look up}
    risk: read
    server: api
    http: {method: GET, path: "/things/{thing_id}"}
    allowed_for: ["*"]
    identity_argument: customer_id
    input_schema:
      type: object
      required: [thing_id, customer_id]
      properties:
        thing_id: {type: string, pattern: "^[0-9]+$"}
        customer_id: {type: string}
    output_schema: {type: object}
"""


def _file(tools: str = GOOD_TOOL, servers: str = "  api: {transport: http, base_url: 'http://127.0.0.1:9'}\n"):
    return "version: 1\nservers:\n" + servers + "tools:\n" + tools


def _error(text: str, **kw) -> ToolConfigError:
    with pytest.raises(ToolConfigError) as info:
        parse_tools(text, file="tools.yaml", variables=kw.get("variables", {}))
    return info.value


def test_the_bundled_file_loads():
    config = load_tools_file(variables={})
    specs = {s.name: s for s in to_specs(config)}
    assert set(specs) == {"get_customer", "get_order", "list_recent_orders", "track_shipment", "change_address",
                          "request_refund", "issue_invoice", "cancel_order"}
    assert {n for n, s in specs.items() if s.writes} == {"change_address", "request_refund", "issue_invoice",
                                                         "cancel_order"}
    assert all(s.identity_argument == "customer_id" for s in specs.values())
    assert config.servers["shop"].url == "" and config.servers["shop"].command


def test_a_good_file_parses():
    spec = to_specs(parse_tools(_file(), variables={}))[0]
    assert spec.binding.path == "/things/{thing_id}" and spec.caller_arguments == ["thing_id"]


def test_unknown_field_names_line_and_tool():
    err = _error(_file(GOOD_TOOL.replace("    risk: read\n", "    risk: read\n    colour: blue\n")))
    assert err.line == 8 and err.field == "tools[0](lookup).colour" and "unknown field" in err.message
    assert str(err).startswith("tools.yaml:8: tools[0](lookup).colour:")


def test_missing_english_description():
    err = _error(_file(GOOD_TOOL.replace("{zh: 查询, en: Look up}", "{zh: 查询}")))
    assert err.field == "tools[0](lookup).description.en" and err.line == 6


def test_bad_json_schema():
    err = _error(_file(GOOD_TOOL.replace("output_schema: {type: object}", "output_schema: {type: objekt}")))
    assert err.field == "tools[0](lookup).output_schema" and "JSON Schema" in err.message and err.line == 18


def test_path_parameter_needs_a_pattern():
    err = _error(_file(GOOD_TOOL.replace('{type: string, pattern: "^[0-9]+$"}', "{type: string}")))
    assert err.field == "tools[0](lookup).http.path" and "pattern" in err.message and err.line == 9


def test_unknown_server_and_a_write_without_idempotency_argument():
    err = _error(_file(GOOD_TOOL.replace("server: api", "server: nowhere")))
    assert err.field == "tools[0](lookup).server" and "unknown server" in err.message and err.line == 8
    mcp = "  shop: {transport: mcp, command: shop-server}\n"
    write = GOOD_TOOL.replace("risk: read", "risk: money").replace("server: api", "server: shop").replace(
        '    http: {method: GET, path: "/things/{thing_id}"}\n', "")
    # a server that takes no key argument: the gateway keeps the key in its audit instead
    spec = to_specs(parse_tools(_file(write, servers=mcp)))[0]
    assert spec.writes and not spec.server_deduplicates
    err = _error(_file(write.replace("    input_schema:", "    idempotency_argument: token\n    input_schema:"),
                       servers=mcp))
    assert err.field == "tools[0](lookup).idempotency_argument" and "not a property" in err.message


def test_unwrap_and_verify():
    mcp = "  shop: {transport: mcp, command: shop-server, unwrap: {path: parsed_content, ok: ok}}\n"
    read = GOOD_TOOL.replace("server: api", "server: shop").replace(
        '    http: {method: GET, path: "/things/{thing_id}"}\n', "")
    write = read.replace("name: lookup", "name: change").replace("risk: read", "risk: write").replace(
        "    input_schema:", "    unwrap: result.data\n    verify: {call: lookup, args: {thing_id: thing_id}, done: "
        "{state: changed, id: $thing_id}}\n    input_schema:")
    specs = {s.name: s for s in to_specs(parse_tools(_file(read + write, servers=mcp)))}
    assert specs["lookup"].unwrap.path == ("parsed_content",) and specs["lookup"].unwrap.ok == "ok"
    assert specs["change"].unwrap.path == ("result", "data") and specs["change"].unwrap.ok is None
    assert specs["change"].verify.tool == "lookup" and specs["change"].verify.done["id"] == "$thing_id"
    err = _error(_file(read + write.replace("call: lookup", "call: change"), servers=mcp))
    assert err.field == "tools[1](change).verify.call" and "not a read tool" in err.message
    err = _error(_file(read + write.replace("args: {thing_id: thing_id}", "args: {thing_id: nothing}"),
                       servers=mcp))
    assert err.field == "tools[1](change).verify.args.thing_id" and "not a property" in err.message
    err = _error(_file(read.replace("    input_schema:", "    unwrap: 'a..b'\n    input_schema:"), servers=mcp))
    assert err.field.startswith("tools[0](lookup).unwrap") and "dotted path" in err.message


def test_environment_references():
    servers = "  api: {transport: http, base_url: '${API_URL}', headers: {Authorization: '${API_TOKEN:-}'}}\n"
    err = _error(_file(servers=servers))
    assert "API_URL is not set" in err.message and err.line == 3
    config = parse_tools(_file(servers=servers), variables={"API_URL": "http://127.0.0.1:9", "API_TOKEN": "t"})
    assert config.servers["api"].base_url == "http://127.0.0.1:9"
    assert config.servers["api"].headers == {"Authorization": "t"}
    literal = "  api: {transport: http, base_url: 'http://x.test', headers: {Authorization: Bearer s3cret}}\n"
    err = _error(_file(servers=literal))
    assert "environment" in err.message and err.field == "servers.api.headers.Authorization"


def test_yaml_syntax_and_duplicate_keys():
    err = _error("version: 1\nservers: [\n")
    assert "not valid YAML" in err.message and err.line
    err = _error(_file(GOOD_TOOL.replace("    risk: read\n", "    risk: read\n    risk: write\n")))
    assert "duplicate key" in err.message and err.line == 8


def test_duplicate_tool_names():
    err = _error(_file(GOOD_TOOL + GOOD_TOOL))
    assert err.field == "tools[1](lookup).name" and "duplicate" in err.message
    assert err.line == 5 + len(GOOD_TOOL.splitlines())  # the second tool's name line
