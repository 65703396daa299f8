def describe(body: str, function: str) -> str:
    return f"{function}: {body}"
