"""docs/api-admin.md is generated from the admin API's signatures and docstrings: current and complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from akresil.admin import Admin

from .repo_scripts import ROOT, load_script

PAGE = ROOT / "docs" / "api-admin.md"


gen = load_script("tools/gen_api_docs.py")


def test_committed_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == gen.render(), "docs/api-admin.md is stale: run tools/gen_api_docs.py"


def test_every_public_admin_method_is_documented_in_the_page() -> None:
    text = gen.render()
    names = gen.public_methods(Admin)
    assert {"list_consumer_groups", "describe_consumer_groups", "delete_consumer_groups",
            "list_consumer_group_offsets", "alter_consumer_group_offsets", "delete_consumer_group_offsets",
            "describe_configs", "incremental_alter_configs", "create_partitions", "delete_records",
            "describe_acls", "create_acls", "delete_acls", "elect_leaders", "describe_user_scram_credentials",
            "alter_user_scram_credentials", "describe_producers", "list_transactions",
            "describe_transactions", "alter_partition_reassignments", "list_partition_reassignments",
            "describe_client_quotas", "alter_client_quotas"} <= set(names)
    for name in names:
        assert f"### `Admin.{name}`" in text


def test_a_missing_docstring_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    async def undocumented(self: Admin) -> None:
        pass

    monkeypatch.setattr(Admin, "undocumented", undocumented, raising=False)
    with pytest.raises(gen.MissingDocstring, match="Admin.undocumented"):
        gen.render()


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "api.md"
    stale.write_text("old", encoding="utf-8")
    assert gen.main(["--check", "--out", str(stale)]) == 1
