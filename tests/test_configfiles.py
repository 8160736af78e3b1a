"""Config files (spec §10): the lenient fastjson reader/writer, the .bak protocol, the four tables."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.errors import InvalidQueueIdError, InvalidTopicError, StoreConfigError, StoreReadOnlyError
from rocketstore.files.configfiles import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupTable,
    TopicConfigTable,
    dumps_fastjson,
    loads_fastjson,
)

# consumerOffset.json as a 4.x broker writes it (fastjson PrettyFormat + SortField): the
# Map<Integer, Long> of each group is written inline with unquoted keys, its brace on a new line.
BROKER_CONSUMER_OFFSET = (
    "{\n"
    '\t"offsetTable":{\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n'
    "\t\t},\n"
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251,3:250\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)

BROKER_TOPICS = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":5,\n'
    '\t\t"timestamp":1682946169710\n'
    "\t},\n"
    '\t"topicConfigTable":{\n'
    '\t\t"TopicTest":{\n'
    '\t\t\t"order":false,\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":4,\n'
    '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
    '\t\t\t"topicName":"TopicTest",\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":4\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


# -- the reader ------------------------------------------------------------------------------------


def test_unquoted_integer_keys_become_ints():
    assert loads_fastjson("{0:250,1:250}") == {0: 250, 1: 250}
    assert loads_fastjson("{-1:5, 12 : 7}") == {-1: 5, 12: 7}


def test_tabs_newlines_and_mixed_keys():
    text = '{\n\t"a":{1:2,\n\t\t"1":3},\r\n\tb : [true,false,null,1.5,-2e3],\n}'
    assert loads_fastjson(text) == {"a": {1: 2, "1": 3}, "b": [True, False, None, 1.5, -2000.0]}


def test_strings_with_braces_and_colons_are_left_alone():
    text = '{"a":"{1:2,3:4}","b":",5:6","c":"x\\"{7:8}","{9:":{10:"}"}}'
    assert loads_fastjson(text) == {"a": "{1:2,3:4}", "b": ",5:6", "c": 'x"{7:8}', "{9:": {10: "}"}}


def test_escapes_and_unicode():
    assert loads_fastjson('["\\u00e9\\n\\t\\\\", "é😀"]') == ["é\n\t\\", "é😀"]
    assert loads_fastjson(b'{"k":"\xc3\xa9"}') == {"k": "é"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "{",
        '{"a":}',
        '{"a":1}x',
        "[1,,2]",
        "{:1}",
        '{"a" 1}',
        "nul",
        "{'a':1}",
        '"unterminated',
        "[1 2]",
        '{"a":1,,}',
        b"\xff",
    ],
)
def test_garbage_raises_store_config_error(text):
    with pytest.raises(StoreConfigError) as info:
        loads_fastjson(text)
    assert isinstance(info.value, ValueError)


def test_deep_nesting_is_refused_not_crashed():
    with pytest.raises(StoreConfigError):
        loads_fastjson("[" * 100_000)


# -- the writer ------------------------------------------------------------------------------------


def test_writer_matches_fastjson_pretty_layout():
    assert dumps_fastjson({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert dumps_fastjson({"offsetTable": {1: 0, 2: 5}}) == '{\n\t"offsetTable":{1:0,2:5\n\t}\n}'
    assert (
        dumps_fastjson({"a": [1, 2], "b": [3], "c": [], "d": None})
        == '{\n\t"a":[\n\t\t1,\n\t\t2\n\t],\n\t"b":[3],\n\t"c":[]\n}'
    )
    assert dumps_fastjson({"a": {0: 1}}, pretty=False) == '{"a":{0:1}}'
    assert dumps_fastjson('q"\\\x01\u2028é') == '"q\\"\\\\\\u0001\u2028é"'


def test_writer_refuses_what_json_cannot_hold():
    for bad in [{1.5: 1}, {None: 1}, {True: 1}, float("nan"), float("inf"), {"a": object()}, {1, 2}]:
        with pytest.raises(StoreConfigError):
            dumps_fastjson(bad)


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_keys = st.text() | st.integers(-(2**63), 2**63 - 1)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(json_keys, children.filter(lambda v: v is not None), max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_fastjson_round_trip(value, pretty):
    assert loads_fastjson(dumps_fastjson(value, pretty=pretty)) == value


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        json_scalars,
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(st.text(), c.filter(lambda v: v is not None), max_size=4)
        ),
        max_leaves=20,
    )
)
def test_output_without_int_keys_is_strict_json(value):
    text = dumps_fastjson(value)
    assert json.loads(text) == value
    assert loads_fastjson(json.dumps(value, indent=2)) == value


# -- the .bak protocol -------------------------------------------------------------------------


def test_persist_writes_file_and_keeps_previous_as_bak(tmp_path):
    path = tmp_path / "config" / "delayOffset.json"
    table = DelayOffsetTable(str(path))
    assert table.load() is False and table.loaded_from is None
    table.update(1, 10)
    assert table.persist() is True
    assert path.read_text() == '{\n\t"offsetTable":{1:10\n\t}\n}'
    assert not (tmp_path / "config" / "delayOffset.json.bak").exists()
    assert table.persist() is False  # nothing changed
    table.update(2, 3)
    table.persist()
    assert (tmp_path / "config" / "delayOffset.json.bak").read_text() == '{\n\t"offsetTable":{1:10\n\t}\n}'
    assert not (tmp_path / "config" / "delayOffset.json.tmp").exists()
    assert DelayOffsetTable.open(str(path)).as_dict() == {1: 10, 2: 3}


@pytest.mark.parametrize("damage", ["missing", "empty", "blank", "garbage", "truncated", "wrong-shape"])
def test_load_falls_back_to_bak(tmp_path, damage):
    path = tmp_path / "consumerOffset.json"
    table = ConsumerOffsetTable(str(path))
    table.commit("g", "TopicTest", 0, 5)
    table.persist()
    table.commit("g", "TopicTest", 0, 9)
    table.persist()  # .bak holds 5, the file 9
    if damage == "missing":
        path.unlink()
    else:
        path.write_text(
            {
                "empty": "",
                "blank": " \n\t",
                "garbage": "\x00\x01 not json",
                "truncated": BROKER_CONSUMER_OFFSET[:40],
                "wrong-shape": '{"offsetTable":[1,2]}',
            }[damage]
        )
    loaded = ConsumerOffsetTable.open(str(path))
    assert loaded.loaded_from == str(path) + ".bak"
    assert loaded.query("g", "TopicTest", 0) == 5


def test_persist_after_a_bad_file_keeps_the_good_bak(tmp_path):
    path = tmp_path / "topics.json"
    table = TopicConfigTable(str(path))
    table.create("A", 4)
    table.persist()
    table.create("B", 4)
    table.persist()
    path.write_text("garbage")
    loaded = TopicConfigTable.open(str(path))
    assert sorted(loaded.topics) == ["A"]
    loaded.create("C", 2)
    loaded.persist()  # the garbage is not moved over the .bak
    assert sorted(TopicConfigTable.open(str(path) + ".bak").topics) == ["A"]
    assert sorted(TopicConfigTable.open(str(path)).topics) == ["A", "C"]


def test_unreadable_file_and_bak_refuse_to_load(tmp_path):
    path = tmp_path / "subscriptionGroup.json"
    path.write_text("{")
    with pytest.raises(StoreConfigError):
        SubscriptionGroupTable.open(str(path))
    path.unlink()
    (tmp_path / "subscriptionGroup.json.bak").write_text("[")
    with pytest.raises(StoreConfigError):
        SubscriptionGroupTable.open(str(path))


def test_read_only_table_refuses_to_persist(tmp_path):
    table = DelayOffsetTable.open(str(tmp_path / "delayOffset.json"), read_only=True)
    table.update(1, 1)
    with pytest.raises(StoreReadOnlyError):
        table.persist()
    assert not (tmp_path / "delayOffset.json").exists()


# -- Java-written files ------------------------------------------------------------------------


def test_java_delay_offset_json_loads_and_is_written_back_identically(java_store):
    path = java_store / "config" / "delayOffset.json"
    table = DelayOffsetTable.open(str(path), read_only=True)
    assert table.loaded_from == str(path) and len(table) == 0
    assert table.to_json().encode() == path.read_bytes()
    assert DelayOffsetTable.in_store(str(java_store), read_only=True).as_dict() == {}


def test_consumer_offsets_as_a_broker_writes_them(tmp_path):
    path = tmp_path / "consumerOffset.json"
    path.write_text(BROKER_CONSUMER_OFFSET)
    table = ConsumerOffsetTable.open(str(path))
    group = "please_rename_unique_group_name_4"
    assert table.query_all(group, "TopicTest") == {0: 250, 1: 249, 2: 251, 3: 250}
    assert table.query(group, "TopicTest", 1) == 249
    assert table.query(group, "TopicTest", 9) == -1
    assert table.query("nobody", "TopicTest", 0) == -1
    assert table.topics(group) == ["%RETRY%please_rename_unique_group_name_4", "TopicTest"]
    assert table.groups("TopicTest") == [group]
    assert table.to_json() == BROKER_CONSUMER_OFFSET  # byte for byte what the broker wrote


def test_consumer_offset_commit_and_remove(tmp_path):
    table = ConsumerOffsetTable(str(tmp_path / "consumerOffset.json"))
    table.commit("g1", "T", 3, 30)
    table.commit("g1", "T", 0, 10)
    table.commit("g1", "U", 0, 1)
    table.commit("g2", "T", 0, 7)
    assert '"T@g1":{0:10,3:30\n' in table.to_json()  # queue ids sorted, as a TreeMap
    assert table.remove("g1", "T", 3) and table.query("g1", "T", 3) == -1
    assert table.remove("g1", "T") and table.query_all("g1", "T") == {}
    assert not table.remove("g1", "T")
    assert table.remove("g1") and table.groups() == ["g2"]
    table.persist()
    assert ConsumerOffsetTable.open(table.path).query("g2", "T", 0) == 7
    with pytest.raises(InvalidQueueIdError):
        table.commit("g", "T", -1, 0)
    with pytest.raises(StoreConfigError):
        table.commit("g@x", "T", 0, 0)
    with pytest.raises(StoreConfigError):
        table.commit("g", "T", 0, -5)


def test_consumer_offset_quoted_keys_and_5x_extras(tmp_path):
    path = tmp_path / "consumerOffset.json"
    path.write_text(
        '{"dataVersion":{"counter":3,"timestamp":1},'
        '"groupTopicMap":{"g":["T"]},"offsetTable":{"T@g":{"0":4}}}'
    )
    table = ConsumerOffsetTable.open(str(path))
    assert table.query("g", "T", 0) == 4
    text = table.to_json()
    assert '"dataVersion"' in text and "groupTopicMap" not in text and "{0:4\n" in text


def test_topics_json_round_trip_and_api(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(BROKER_TOPICS)
    table = TopicConfigTable.open(str(path))
    assert table.counter == 5 and table.queues("TopicTest") == 4 and table.queues("Nope") == 0
    assert table.to_json() == BROKER_TOPICS
    entry = table.create("Orders", 8, perm=4, order=True)
    assert entry == {
        "order": True,
        "perm": 4,
        "readQueueNums": 8,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "Orders",
        "topicSysFlag": 0,
        "writeQueueNums": 8,
    }
    assert table.counter == 6 and table.dirty
    assert "Orders" in table and list(table) == ["TopicTest", "Orders"]
    table.persist()
    again = TopicConfigTable.open(str(path))
    assert again.get("Orders") == entry and again.counter == 6
    assert again.delete("Orders") and not again.delete("Orders") and again.counter == 7
    for bad in ["", "a/b", "x" * 128]:
        with pytest.raises(InvalidTopicError):
            again.create(bad)
    with pytest.raises(StoreConfigError):
        again.create("T", perm=16)
    with pytest.raises(StoreConfigError):
        again.create("T", topic_filter_type="ANY")


def test_topics_json_keeps_5x_fields(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(
        '{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":2},'
        '"topicConfigTable":{"T":{"attributes":{},"order":false,"perm":6,"readQueueNums":1,'
        '"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":1}}}'
    )
    table = TopicConfigTable.open(str(path))
    assert loads_fastjson(table.to_json()) == loads_fastjson(path.read_text())
    table.create("T", 2)
    assert table.get("T")["attributes"] == {} and table.data_version["stateVersion"] == 0


def test_subscription_groups(tmp_path):
    table = SubscriptionGroupTable(str(tmp_path / "subscriptionGroup.json"))
    assert table.retry_max_times("g") == 16
    entry = table.find_or_create("g")
    assert entry["retryMaxTimes"] == 16 and entry["groupName"] == "g" and entry["consumeEnable"] is True
    table.create("h", retry_max_times=3, consumeBroadcastEnable=False)
    assert table.retry_max_times("h") == 3 and table.get("h")["consumeBroadcastEnable"] is False
    assert table.counter == 2
    table.persist()
    text = (tmp_path / "subscriptionGroup.json").read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":2,')
    assert '\t\t"g":{\n\t\t\t"brokerId":0,\n\t\t\t"consumeBroadcastEnable":true,' in text
    again = SubscriptionGroupTable.open(str(tmp_path / "subscriptionGroup.json"))
    assert again.get("h") == table.get("h") and sorted(again) == ["g", "h"]
    assert again.delete("g") and "g" not in again
    with pytest.raises(StoreConfigError):
        again.create("x", retry_max_times="many")


def test_topic_table_takes_the_store_topic_table_arguments(tmp_path):
    path = str(tmp_path / "config" / "topics.json")
    table = TopicConfigTable.open(path, 8, False)  # (path, default_queues, read_only)
    assert table.queues("T") == 0
    table.create("T")
    assert table.queues("T") == 8 and table.topics["T"]["writeQueueNums"] == 8
    assert table.persist() and not table.dirty
    assert TopicConfigTable.in_store(str(tmp_path), 8, True).queues("T") == 8
