"""A profile cell of the wrong type is named as JSON writes it: the text "64" is not shown as the number 64."""

import json

import pytest

from vlmdata.profile.measure import ProfileError, load_profile


@pytest.mark.parametrize(
    "value, shown",
    [("64", '"64"'), (True, "true"), (float("nan"), "NaN"), (None, "null"), (2.5, "2.5"), (-5, "-5")],
)
def test_a_wrong_cell_is_shown_as_json(small_profile, tmp_path, value, shown):
    doc = json.load(open(small_profile))
    doc["rows"]["images"]["width"][0] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert f"rows.images.width[0] is {shown}, expected an integer" in str(e.value)
