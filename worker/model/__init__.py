"""The summarizing model: the prompt, one call through litellm, the answer's parse, the guards on it."""
