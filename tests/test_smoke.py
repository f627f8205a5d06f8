from memlocal import MemoryBank


def test_save_and_get(bank: MemoryBank) -> None:
    result = bank.save("demo", "I prefer tea")
    assert bank.get("demo", result.memory.id) == result.memory
