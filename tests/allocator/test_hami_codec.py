"""HAMi's wire formats against the exact strings HAMi's own tests and docs use.

Sources (Project-HAMi/HAMi at tag v2.10.0 unless said otherwise):
- D: ``docs/develop/protocol.md`` (register and pod examples);
- T: ``pkg/device/devices_test.go`` (DecodeNodeDevices / EncodeNodeDevices / DecodePodDevices
  cases and fuzz seeds);
- N: ``pkg/device/nvidia/device_test.go`` (GetNodeDevices JSON cases);
- L: ``pkg/util/nodelock/nodelock_test.go`` (lock values);
- V: Project-HAMi/volcano-vgpu-device-plugin v1.12.0 ``pkg/util/util.go`` (encoders; its tests
  have no example string, so the strings below follow the encoder field by field).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from allocator.hami.codec import (
    HAMI,
    HAMI_V28,
    VOLCANO_VGPU,
    DeviceShare,
    HamiFormatError,
    decode_pod_devices,
    encode_lock,
    encode_pod_devices,
    parse_lock,
)
from allocator.hami.register import (
    RegisteredDevice,
    encode_register_json,
    encode_register_text,
    parse_register,
)

P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"
V100_A = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
V100_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
U8DCD = "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76"


# --------------------------------------------------------------------------- register, text


def test_protocol_doc_register_example_seven_fields() -> None:
    # D: the two-V100 node of the protocol document (7-field text form, up to v2.7).
    text = (f"{V100_A},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
            f"{V100_B},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:")
    devices = parse_register(text)
    assert [d.uuid for d in devices] == [V100_A, V100_B]
    # The 7-field form says index 0 for both: numbered by position instead.
    assert [d.index for d in devices] == [0, 1]
    assert all(d.split_count == 10 and d.memory_mib == 32768 and d.cores == 100
               and d.healthy and d.mode == "hami-core" for d in devices)
    assert devices[0].type == "NVIDIA-Tesla V100-PCIE-32GB"
    assert devices[0].model == "Tesla V100-PCIE-32GB"


def test_decode_node_devices_cases() -> None:
    # T: TestDecodeNodeDevices, the 7- and 9-field cases.
    seven = parse_register(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true:")
    assert seven == (RegisteredDevice(P4, 0, 10, 7680, 100, "NVIDIA-Tesla P4", 0,
                                      "hami-core", True),)
    nine = parse_register(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:")
    assert nine == (RegisteredDevice(P4, 1, 10, 7680, 100, "NVIDIA-Tesla P4", 0,
                                     "hami-core", True),)


@pytest.mark.parametrize("text", [
    # T: the error cases of TestDecodeNodeDevices, each refused there too.
    f"{P4},notanint,7680,100,NVIDIA-Tesla P4,0,true:",
    f"{P4},10,notanint,100,NVIDIA-Tesla P4,0,true:",
    f"{P4},10,7680,notanint,NVIDIA-Tesla P4,0,true:",
    f"{P4},10,7680,100,NVIDIA-Tesla P4,notanint,true:",
    f"{P4},10,7680,100,NVIDIA-Tesla P4,0,notabool:",
    f"{P4},10,7680,100,NVIDIA-Tesla P4:",
    f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,notanint,hami-core:",
    f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,-1,hami-core:",
    "no separator at all",
    "",
])
def test_register_errors_like_hami(text: str) -> None:
    with pytest.raises(HamiFormatError):
        parse_register(text)


def test_encode_node_devices_matches_hami() -> None:
    # T: TestEncodeNodeDevices wants exactly these strings (index 0 and index 1).
    for index in (0, 1):
        device = RegisteredDevice(P4, index, 10, 7680, 100, "NVIDIA-Tesla P4", 0,
                                  "hami-core", True)
        assert encode_register_text([device]) == (
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,{index},hami-core:")
        assert parse_register(encode_register_text([device])) == (device,)


# --------------------------------------------------------------------------- register, JSON


def test_register_json_of_hami_nvidia_tests() -> None:
    # N: the GetNodeDevices cases (v2.8+ JSON form).
    one = parse_register('[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,'
                         '"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}]')
    assert one == (RegisteredDevice("GPU-0", 0, 5, 8192, 100, "NVIDIA-Tesla P4"),)
    two = parse_register('[{"id":"GPU-0","count":1,"devmem":8192,"devcore":100,'
                         '"type":"NVIDIA-V100","health":true},{"id":"GPU-1","count":1,'
                         '"devmem":8192,"devcore":100,"type":"NVIDIA-V100","health":true}]')
    assert [(d.uuid, d.index, d.split_count) for d in two] == [("GPU-0", 0, 1), ("GPU-1", 1, 1)]


def test_register_json_marshal_case_with_unhealthy_card() -> None:
    # T: TestMarshalNodeDevices "test multiple": the second card is unhealthy, NUMA 1.
    devices = parse_register(
        '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","numa":0,'
        '"health":true},{"index":2,"id":"id-2","count":2,"devmem":2048,"devcore":20,'
        '"type":"type2","numa":1,"health":false}]')
    assert [(d.index, d.healthy, d.numa, d.cores) for d in devices] == [
        (1, True, 0, 10), (2, False, 1, 20)]


def test_register_json_mig_case_keeps_the_card() -> None:
    # N: the dynamic-MIG card (extra keys ignored, mode read).
    devices = parse_register(
        '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB",'
        '"numa":0,"health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,'
        '"core":14,"sliceCount":1,"instanceCount":7,"multiprocessorCount":14,'
        '"placements":[{"start":6,"size":1}]}]}]')
    assert devices[0].mode == "mig" and devices[0].split_count == 7


def test_register_json_roundtrip_and_omitempty() -> None:
    devices = (RegisteredDevice("GPU-a", 0, 10, 81920, 100, "NVIDIA-H100", 0),
               RegisteredDevice("GPU-b", 1, 10, 81920, 100, "NVIDIA-H100", 1, healthy=False))
    text = encode_register_json(devices)
    raw = json.loads(text)
    # Go's omitempty: index 0, numa 0 and health false are absent.
    assert "index" not in raw[0] and "numa" not in raw[0] and "health" not in raw[1]
    assert parse_register(text) == devices


@pytest.mark.parametrize("text", [
    "[1]", '{"id":"x"}', '[{"id":""}]', '[{"id":"a,b","count":1}]', '[{"id":"x","count":-1}]',
    '[{"id":"x","count":true}]', '[{"id":"x","health":"yes"}]', '[{"id":"x","devmem":1e400}]',
    "[" * 100_000, '[{"id":"x"},{"id":"x"}]', "[]", '[{"id":"x","devmem":2147483648}]',
])
def test_register_json_hostile(text: str) -> None:
    with pytest.raises(HamiFormatError):
        parse_register(text)


def test_register_json_too_many_devices() -> None:
    items = ",".join(f'{{"id":"GPU-{i}","count":1}}' for i in range(1025))
    with pytest.raises(HamiFormatError):
        parse_register(f"[{items}]")


# --------------------------------------------------------------------------- volcano register


def test_volcano_register_text() -> None:
    # V: EncodeNodeDevices writes id,count,devmem,type,health,mode per device.
    devices = (RegisteredDevice(V100_A, 0, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                                mode="hami-core"),
               RegisteredDevice(V100_B, 1, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                                mode="hami-core", healthy=False))
    text = encode_register_text(devices, VOLCANO_VGPU)
    assert text == (f"{V100_A},10,32768,NVIDIA-Tesla V100-PCIE-32GB,true,hami-core:"
                    f"{V100_B},10,32768,NVIDIA-Tesla V100-PCIE-32GB,false,hami-core:")
    assert parse_register(text, VOLCANO_VGPU) == devices


# --------------------------------------------------------------------------- pod devices


def test_protocol_doc_pod_example() -> None:
    # D: two containers, 3000 and 5000 MiB of one V100, no core limit.
    text = f"{V100_B},NVIDIA,3000,0:;{V100_B},NVIDIA,5000,0:;"
    pod = decode_pod_devices(text)
    assert pod == ((DeviceShare(V100_B, 3000, 0),), (DeviceShare(V100_B, 5000, 0),))
    assert encode_pod_devices(pod) == text


def test_decode_pod_devices_case() -> None:
    # T: TestDecodePodDevices: two containers, one card each, 500 MiB and 3 cores.
    text = f"{U8DCD},NVIDIA,500,3:;{P4},NVIDIA,500,3:;"
    assert decode_pod_devices(text) == ((DeviceShare(U8DCD, 500, 3),),
                                        (DeviceShare(P4, 500, 3),))
    assert encode_pod_devices(decode_pod_devices(text)) == text


def test_fuzz_seeds_and_empty_containers() -> None:
    # T: FuzzDecodePodDevices seeds; an empty entry is a container without a device, kept so
    # the plugin's index mapping holds (init containers, GPU-less containers).
    assert decode_pod_devices(f"{V100_B},NVIDIA,3000,0:;") == ((DeviceShare(V100_B, 3000, 0),),)
    with_gap = f";{V100_B},NVIDIA,3000,0:{P4},NVIDIA,2048,30:;;"
    pod = decode_pod_devices(with_gap)
    assert pod == ((), (DeviceShare(V100_B, 3000, 0), DeviceShare(P4, 2048, 30)), ())
    assert encode_pod_devices(pod) == with_gap


def test_container_order_is_the_callers_and_versions_differ_in_separator_only() -> None:
    init = (DeviceShare(P4, 1024, 10),)
    app = (DeviceShare(V100_A, 4096, 50),)
    # v2.9+: init containers first; v2.8: app containers only (the caller drops init ones).
    assert encode_pod_devices([init, app], HAMI) == (
        f"{P4},NVIDIA,1024,10:;{V100_A},NVIDIA,4096,50:;")
    assert encode_pod_devices([app], HAMI_V28) == f"{V100_A},NVIDIA,4096,50:;"
    # V: volcano joins containers with ';' and closes none.
    assert encode_pod_devices([app, ()], VOLCANO_VGPU) == f"{V100_A},NVIDIA,4096,50:;"
    assert decode_pod_devices(f"{V100_A},NVIDIA,4096,50:;", VOLCANO_VGPU) == (app, ())


@pytest.mark.parametrize("text", [
    "GPU-x,NVIDIA,1:;", "GPU-x,NVIDIA,lots,0:;", "GPU-x,NVIDIA,1,-5:;", ",NVIDIA,1,1:;",
    "x" * 300_000,
])
def test_pod_devices_hostile(text: str) -> None:
    with pytest.raises(HamiFormatError):
        decode_pod_devices(text)


# --------------------------------------------------------------------------- node lock


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_lock_values_of_hami_tests() -> None:
    # L: the owner form, the legacy bare time, and a local time with offset.
    lock = parse_lock("2026-08-01T06:00:00Z,ns,pod-a")
    assert (lock.namespace, lock.name) == ("ns", "pod-a")
    assert lock.taken_at == _ts("2026-08-01T06:00:00+00:00")
    assert lock.held_by("ns", "pod-a") and not lock.held_by("ns", "pod-b")
    legacy = parse_lock("2026-08-01T06:00:00Z")
    assert (legacy.namespace, legacy.name) == ("", "")
    assert parse_lock("2026-07-03T15:35:10+08:00").taken_at == _ts("2026-07-03T07:35:10+00:00")


def test_lock_encode_and_expiry() -> None:
    now = datetime(2026, 8, 1, 6, 0, 0, tzinfo=UTC).timestamp()
    assert encode_lock(now + 0.7, "ns", "pod-a") == "2026-08-01T06:00:00Z,ns,pod-a"
    lock = parse_lock(encode_lock(now, "ns", "pod-a"))
    assert not lock.expired(now + 300)
    assert lock.expired(now + 301)


@pytest.mark.parametrize("value", ["", "yesterday", "2026-08-01T06:00:00", "a,b",
                                   "2026-08-01T06:00:00Z,ns,pod,extra", "9" * 100])
def test_lock_hostile(value: str) -> None:
    with pytest.raises(HamiFormatError):
        parse_lock(value)


def test_each_hami_release_the_webhook_knows_is_a_flavor_with_the_same_container_order() -> None:
    # One setting for both services (TESSERA_HAMI_AGENT): the webhook refuses a GPU init
    # container exactly where the flavor the allocator writes lists app containers only.
    from allocator.hami.codec import FLAVORS
    from tessera.agent_profiles import AGENTS, HAMI_AGENTS, AgentProfile

    for name, agent in HAMI_AGENTS.items():
        assert FLAVORS[name].init_containers is not agent.app_containers_only
    for profile in (AgentProfile.HAMI, AgentProfile.VOLCANO_VGPU):
        assert FLAVORS[profile.value].init_containers is not AGENTS[profile].app_containers_only
