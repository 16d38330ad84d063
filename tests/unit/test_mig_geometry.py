"""mig.py: the profile tables, profile choice, free placements and legality (NVIDIA MIG guide)."""

from __future__ import annotations

import pytest

from gpuslice import mig

H100 = mig.CATALOG["H100-80GB"]


def by(name: str, table: tuple[mig.Profile, ...] = H100) -> mig.Profile:
    return next(p for p in table if p.name == name)


@pytest.mark.parametrize(("model", "mib", "key"), [
    ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
    ("NVIDIA H100 PCIe", 81559, "H100-80GB"),
    ("NVIDIA H100 NVL", 95830, "H100-94GB"),
    ("NVIDIA H200", 143771, "H200-141GB"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
    ("NVIDIA GH200 480GB", 97871, None),
    ("NVIDIA L4", 23034, None),
    ("Tesla T4", 15360, None),
])
def test_catalog_key_names_the_board_or_none_where_mig_is_not_offered(model, mib, key):
    assert mig.catalog_key(model, mib) == key


def test_h100_table_has_the_placements_of_the_mig_user_guide():
    assert {p.name: (p.compute, p.size, p.starts) for p in H100} == {
        "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6)), "1g.20gb": (1, 2, (0, 2, 4, 6)),
        "2g.20gb": (2, 2, (0, 2, 4)), "3g.40gb": (3, 4, (0, 4)), "4g.40gb": (4, 4, (0,)),
        "7g.80gb": (7, 8, (0,))}


def test_table_memory_is_a_lower_bound_of_the_size_in_the_profile_name():
    for table in mig.CATALOG.values():
        for p in table:
            gb = float(p.name.split(".")[1].removesuffix("gb"))
            assert (gb - 0.5) * 1e9 - (1 << 20) < p.memory_mib * (1 << 20) <= (gb - 0.5) * 1e9


@pytest.mark.parametrize(("mib", "cores", "want"), [
    (1, 0, "1g.10gb"), (9059, 0, "1g.10gb"), (9060, 0, "1g.20gb"), (18596, 0, "1g.20gb"),
    (18597, 0, "3g.40gb"), (37670, 0, "3g.40gb"), (37671, 0, "7g.80gb"),
    (1000, 20, "2g.20gb"),  # 20 % of 7 slices = 1.4 -> 2 compute slices
    (1000, 50, "4g.40gb"), (1000, 100, "7g.80gb"), (75818, 0, None),
])
def test_profile_for_takes_the_smallest_profile_holding_memory_and_cores(mib, cores, want):
    got = mig.profile_for(H100, mib, cores)
    assert (got.name if got else None) == want


def test_free_starts_skip_every_overlap():
    assert mig.free_starts(by("3g.40gb"), [(4, 1)]) == [0]
    assert mig.free_starts(by("2g.20gb"), [(0, 4)]) == [4]
    assert mig.free_starts(by("7g.80gb"), [(6, 1)]) == []
    assert mig.free_starts(by("1g.10gb"), []) == [0, 1, 2, 3, 4, 5, 6]


def test_choose_start_keeps_the_4g_placement_open_for_a_3g():
    assert mig.choose_start(by("3g.40gb"), H100, []) == 4  # start 0 would rule out 4g.40gb


def test_choose_start_on_a_full_gpu_is_none():
    assert mig.choose_start(by("1g.10gb"), H100, [(0, 8)]) is None


@pytest.mark.parametrize(("slices", "problem"), [
    ([("3g.40gb", 0), ("3g.40gb", 4)], None),
    ([("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)], None),
    ([("4g.40gb", 4)], "4g.40gb may start at slice 0, not 4"),
    ([("3g.40gb", 0), ("2g.20gb", 2)], "2g.20gb@2 overlaps 3g.40gb@0"),
    ([("9g.90gb", 0)], "profile 9g.90gb is not offered"),
])
def test_legal_accepts_what_hardware_holds_and_names_what_it_does_not(slices, problem):
    got = mig.legal(H100, [mig.MigSlice(profile=n, start=s) for n, s in slices])
    if problem is None:
        assert got is None
    else:
        assert got is not None and got.startswith(problem)


def test_geometry_cuts_profiles_by_the_longest_matching_model_key():
    g = mig.Geometry(profiles={"H100": ("1g.10gb", "7g.80gb"), "H100 80GB HBM3": ("3g.40gb",)})
    assert [p.name for p in g.allowed("NVIDIA H100 80GB HBM3", H100)] == ["3g.40gb"]
    assert [p.name for p in g.allowed("NVIDIA H100 PCIe", H100)] == ["1g.10gb", "7g.80gb"]
    assert g.allowed("NVIDIA A100-SXM4-40GB", mig.CATALOG["A100-40GB"]) == \
        mig.CATALOG["A100-40GB"]
    assert mig.Geometry(profiles={"H100": ("1g.5gb",)}).unknown("NVIDIA H100", H100) == \
        ["1g.5gb"]


def test_check_gpu_names_overlapping_instances_and_bad_profiles():
    ok = mig.MigGPU(profiles=H100, instances=(
        mig.Instance(profile="3g.40gb", start=4, size=4),))
    assert mig.check_gpu(ok) is None
    assert ok.free_placements()["4g.40gb"] == [0]
    assert ok.free_placements()["7g.80gb"] == []
    bad = mig.MigGPU(profiles=H100, instances=(
        mig.Instance(profile="3g.40gb", start=4, size=4),
        mig.Instance(profile="1g.10gb", start=5, size=1)))
    assert "overlaps" in (mig.check_gpu(bad) or "")
    twice = mig.MigGPU(profiles=(H100[0], H100[0]))
    assert "listed twice" in (mig.check_gpu(twice) or "")
    outside = mig.MigGPU(profiles=(mig.Profile(name="x", compute=1, memory_mib=1, size=2,
                                               starts=(7,)),))
    assert "within 0..6" in (mig.check_gpu(outside) or "")
