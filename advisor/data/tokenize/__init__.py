"""Token lengths of SFT records exactly as Megatron-Bridge 0.6.2 tokenizes them, from a local tokenizer.

``tokenizer`` loads a local Hugging Face folder or SentencePiece model (never a download); ``sft`` counts
prompt-template and prompt-completion records (``GPTSFTDataset``); ``chat`` counts conversations
(``GPTSFTChatDataset``). Each length is ``len(input_ids)`` of Megatron-Bridge's processed example.
"""
